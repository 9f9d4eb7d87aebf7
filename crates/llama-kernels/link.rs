// The linker flags that route llama.cpp through `tether-llama-kernels`, shared by the build
// scripts of every package whose binaries or tests link llama.cpp (each `include!`s this file).

/// Links this package's binaries and tests so that ggml's call to its tiled kernels,
/// `llamafile_sgemm`, reaches `__wrap_llamafile_sgemm` (crates/llama-kernels/src/q4_1.rs),
/// which hands what it does not take to ggml's own. `-u` pulls the kernel's object out of its
/// archive before ggml's asks for it. Only where the kernel is built: x86-64 Linux.
fn link_llama_kernels() {
    println!("cargo:rerun-if-changed=../llama-kernels/link.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os == "linux" && arch == "x86_64" {
        println!("cargo:rustc-link-arg=-Wl,--wrap=llamafile_sgemm");
        println!("cargo:rustc-link-arg=-Wl,-u,__wrap_llamafile_sgemm");
    }
}
