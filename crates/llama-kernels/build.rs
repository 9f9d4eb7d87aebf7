//! Links this crate's tests and bench as the binaries that use it are linked: ggml's
//! `llamafile_sgemm` through `__wrap_llamafile_sgemm` (link.rs).

include!("link.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    link_llama_kernels();
}
