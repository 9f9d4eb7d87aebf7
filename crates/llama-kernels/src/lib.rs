//! Kernels llama.cpp's CPU backend (ggml) calls in place of its own, for the embedded model.
//! They are reached through the linker, not through llama.cpp's source, which stays as
//! published: a binary that links llama.cpp is linked with `--wrap=llamafile_sgemm` (the
//! build scripts of `tether-local` and `tether`), so ggml's call to its tiled matrix kernels
//! arrives here first, and what these kernels do not take goes on to ggml's own. When ggml
//! runs one thread because another job keeps a core busy, a helper thread (`helper`) takes
//! chunks of the prompt's products whenever the scheduler gives it a turn.
//!
//! Each kernel gives ggml's own results bit for bit, so the model's answers cannot change,
//! only their speed; its tests hold it to that against ggml's own functions. No I/O, no
//! dependencies; compiled optimised in every profile (the workspace's Cargo.toml), since an
//! unoptimised kernel would make every test's prompt fifty times slower.

// Vector intrinsics and the C calling convention ggml uses.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[allow(unsafe_code)]
pub mod q4_1;

// The helper thread for work ggml does on one thread.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) mod helper;

/// Lets the kernels share the work ggml does on one thread (the prompt's products) with a
/// helper thread, or stops it, for the operations that follow: for a request that runs the
/// embedded model on one thread because another job keeps a core busy. Nothing where the
/// kernels are not built in.
pub fn share_one_thread_work(on: bool) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    helper::set_helper(on);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    let _ = on;
}

/// How many pieces of work (chunks of a product's rows) the helper thread
/// ([`share_one_thread_work`]) has computed in this process.
pub fn helped_pieces() -> u64 {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return helper::helped_pieces();
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return 0;
}

/// How many prompt products the tiled Q4_1 kernel has computed in this process: 0 where it
/// is not built in, or while `TETHER_PROMPT_KERNEL=ggml` leaves them to ggml.
pub fn q4_1_products() -> u64 {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return q4_1::products();
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return 0;
}
