//! Links the binary, its tests and benches through the embedded model's Q4_1 prompt kernel
//! (crates/llama-kernels/link.rs), when the embedded model is built in.

// A build script speaks to cargo on standard output; nothing here comes from a server or model.
#![allow(clippy::disallowed_macros)]

include!("../llama-kernels/link.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LOCAL").is_some() {
        link_llama_kernels();
    }
}
