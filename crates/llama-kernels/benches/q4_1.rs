//! The tiled Q4_1 prompt kernel against ggml's own path for the same products: one dot
//! product per output (`ggml_vec_dot_q4_1_q8_1`, what ggml's matrix product calls for Q4_1
//! weights), on one thread, for the default model's shapes (SmolLM2-135M: 576 wide, 1536 in
//! its feed-forward layers, 192 for keys and values) and a prompt of 64 tokens, both checked to
//! give the same bits.
//! `cargo bench -p tether-llama-kernels --bench q4_1`.

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::time::Instant;

use llama_cpp_sys_2 as ggml;
use tether_llama_kernels::q4_1::{
    __wrap_llamafile_sgemm, ComputeParams, GGML_TYPE_F32, GGML_TYPE_Q4_1, GGML_TYPE_Q8_1,
};

/// Bytes of one Q4_1 block (two halves, 16 bytes of nibbles) and one Q8_1 block.
const Q4_1_BYTES: usize = 20;
const Q8_1_BYTES: usize = 36;

/// Blocks of random quants behind valid halves (a scale between 1/256 and 1/2).
fn blocks(seed: &mut u64, count: usize, size: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; count * size];
    for block in bytes.chunks_mut(size) {
        for byte in block.iter_mut() {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *byte = *seed as u8;
        }
        for half in 0..2 {
            let bits = 0x1c00u16 + (block[half * 2] as u16 & 0x3ff) + 0x400 * (block[1] as u16 % 6);
            block[half * 2..half * 2 + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    bytes
}

fn main() {
    // SAFETY: ggml's own initialisation and type table.
    let dot_product = unsafe {
        ggml::ggml_cpu_init();
        (*ggml::ggml_get_type_traits_cpu(ggml::GGML_TYPE_Q4_1)).vec_dot
    };
    let Some(vec_dot) = dot_product else {
        eprintln!("ggml has no dot product for Q4_1 weights in this build");
        std::process::exit(1);
    };
    let tokens = 64;
    println!(
        "Q4_1 prompt products, {tokens} tokens, one thread, the fastest of 15 rounds, interleaved (ms):"
    );
    for (rows, width) in [(576, 576), (192, 576), (1536, 576), (576, 1536)] {
        let k = width / 32;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let a = blocks(&mut seed, rows * k, Q4_1_BYTES);
        let b = blocks(&mut seed, tokens * k, Q8_1_BYTES);
        let mut tiled = vec![0f32; rows * tokens];
        let mut dots = vec![0f32; rows * tokens];
        let (mut tiled_ms, mut dots_ms) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            let started = Instant::now();
            // SAFETY: the matrices have the sizes passed; one thread of one.
            let taken = unsafe {
                __wrap_llamafile_sgemm(
                    &ComputeParams { ith: 0, nth: 1 },
                    rows as i64,
                    tokens as i64,
                    k as i64,
                    a.as_ptr().cast(),
                    k as i64,
                    b.as_ptr().cast(),
                    k as i64,
                    tiled.as_mut_ptr().cast(),
                    rows as i64,
                    GGML_TYPE_Q4_1,
                    GGML_TYPE_Q8_1,
                    GGML_TYPE_F32,
                )
            };
            assert!(taken, "the kernel is off (TETHER_PROMPT_KERNEL=ggml?)");
            tiled_ms.push(started.elapsed().as_secs_f64() * 1e3);
            let started = Instant::now();
            for j in 0..tokens {
                for i in 0..rows {
                    // SAFETY: row i of A and row j of B hold k blocks each.
                    unsafe {
                        vec_dot(
                            width as c_int,
                            &mut dots[j * rows + i],
                            0,
                            a.as_ptr().add(i * k * Q4_1_BYTES).cast(),
                            0,
                            b.as_ptr().add(j * k * Q8_1_BYTES).cast(),
                            0,
                            1,
                        )
                    };
                }
            }
            dots_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        assert!(
            tiled
                .iter()
                .zip(&dots)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
        // The fastest round: the one a busy moment of this shared machine touched least.
        let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let (t, d) = (fastest(&tiled_ms), fastest(&dots_ms));
        println!(
            "  {rows:>5} x {width:<5} tiled {t:6.3}   ggml's dot products {d:6.3}   {:.2}x",
            d / t
        );
    }
}
