//! Links the binary, its tests and benches through the embedded model's Q4_1 prompt kernel
//! (crates/llama-kernels/src/q4_1.rs): ggml's call to its tiled kernels, `llamafile_sgemm`, goes
//! to `__wrap_llamafile_sgemm`, which hands what it does not take to ggml's own.

// A build script speaks to cargo on standard output; nothing here comes from a server or model.
#![allow(clippy::disallowed_macros)]

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let local = std::env::var_os("CARGO_FEATURE_LOCAL").is_some();
    if local && os == "linux" && arch == "x86_64" {
        // -u pulls the kernel's object out of tether-llama-kernels' archive before ggml's asks for it.
        println!("cargo:rustc-link-arg=-Wl,--wrap=llamafile_sgemm");
        println!("cargo:rustc-link-arg=-Wl,-u,__wrap_llamafile_sgemm");
    }
}
