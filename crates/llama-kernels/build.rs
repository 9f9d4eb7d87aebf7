//! Links this crate's tests as the binaries that use it are linked (crates/local/build.rs,
//! crates/tether/build.rs): ggml's `llamafile_sgemm` through `__wrap_llamafile_sgemm`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os == "linux" && arch == "x86_64" {
        println!("cargo:rustc-link-arg=-Wl,--wrap=llamafile_sgemm");
        println!("cargo:rustc-link-arg=-Wl,-u,__wrap_llamafile_sgemm");
    }
}
