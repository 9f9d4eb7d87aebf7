//! Links this crate's tests through `tether-llama-kernels`' Q4_1 prompt kernel
//! (crates/llama-kernels/link.rs); crates/tether/build.rs does the same for the binary.

include!("../llama-kernels/link.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    link_llama_kernels();
}
