//! Links this crate's tests through `tether-llama-kernels`' Q4_1 prompt kernel: ggml's call
//! to its tiled kernels, `llamafile_sgemm`, goes to `__wrap_llamafile_sgemm`, which hands
//! what it does not take to ggml's own. crates/tether/build.rs does the same for the binary.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os == "linux" && arch == "x86_64" {
        // -u pulls the kernel's object out of tether-llama-kernels' archive before ggml's asks for it.
        println!("cargo:rustc-link-arg=-Wl,--wrap=llamafile_sgemm");
        println!("cargo:rustc-link-arg=-Wl,-u,__wrap_llamafile_sgemm");
    }
}
