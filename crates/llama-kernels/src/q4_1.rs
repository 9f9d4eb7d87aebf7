//! llama.cpp's prompt products over Q4_1 weights, tiled. ggml has a tiled kernel (llamafile's
//! tinyBLAS) for Q8_0, Q4_0 and float weights, but multiplies Q4_1 weights, the default model's,
//! one dot product per call: every call unpacks its weight row again, reloads the prompt's row
//! and sums its eight lanes. Here four weight rows by two prompt tokens share each load and
//! each unpacking (docs/decisions.md, "A tiled kernel for Q4_1 prompts").
//!
//! Every output is the float ggml's own AVX2 dot product (`ggml_vec_dot_q4_1_q8_1`) gives, bit
//! for bit: each of the eight pairs keeps its own eight-lane accumulator and scalar sum of the
//! minimums, fed block after block in ggml's order with ggml's fused operations, and summed
//! across lanes the way ggml sums them. So answers cannot change, only their speed; a unit test
//! holds it to that against ggml's own function.
//!
//! The hook is the linker's: the binaries that link llama.cpp are linked with
//! `--wrap=llamafile_sgemm` (the build scripts of tether-local and tether, and this crate's for its tests), so ggml's call to
//! its tiled kernels reaches [`__wrap_llamafile_sgemm`], which takes Q4_1 products and hands
//! every other one to ggml's own (`__real_llamafile_sgemm`). llama.cpp's source stays as
//! published. `TETHER_PROMPT_KERNEL=ggml` leaves every product to ggml, for comparisons.

use std::arch::x86_64::*;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// ggml's type numbers (ggml.h, `enum ggml_type`).
const GGML_TYPE_F32: c_int = 0;
const GGML_TYPE_Q4_1: c_int = 3;
const GGML_TYPE_Q8_1: c_int = 9;

/// Weight rows by prompt tokens in one tile: eight accumulators, two prompt blocks, the
/// unpacked weights, the sums of minimums and two constants fit AVX2's sixteen registers.
const ROWS: usize = 4;
const COLS: usize = 2;
/// One lane of the tile's vectors per output: lane `row * COLS + col`.
const LANES: usize = ROWS * COLS;

/// ggml's `block_q4_1`: 32 weights as `d * q + m` with `q` in 0..16, two to a byte (the low
/// nibbles are the first 16).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4_1 {
    d: u16,
    m: u16,
    qs: [u8; 16],
}

/// ggml's `block_q8_1`: 32 values as `d * q`, and `s = d * sum(q)`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ8_1 {
    d: u16,
    s: u16,
    qs: [i8; 32],
}

/// The leading fields of ggml's `struct ggml_compute_params` (ggml-cpu-impl.h): which thread
/// of how many. Only read, and only these two.
#[repr(C)]
pub struct ComputeParams {
    ith: c_int,
    nth: c_int,
}

unsafe extern "C" {
    /// ggml's own `llamafile_sgemm`, by the name the linker's `--wrap` gives it.
    fn __real_llamafile_sgemm(
        params: *const ComputeParams,
        m: i64,
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        ldb: i64,
        c: *mut c_void,
        ldc: i64,
        atype: c_int,
        btype: c_int,
        ctype: c_int,
    ) -> bool;
}

/// 0 until the first product decides; then 1 (this kernel) or 2 (ggml's path only).
static MODE: AtomicU8 = AtomicU8::new(0);
/// Products this kernel computed, for the log and the tests.
static PRODUCTS: AtomicU64 = AtomicU64::new(0);

/// How many prompt products this kernel has computed in this process.
pub fn products() -> u64 {
    PRODUCTS.load(Ordering::Relaxed)
}

/// Whether this kernel takes Q4_1 products: the CPU has what it needs (llama.cpp itself is
/// built for AVX2 with FMA and F16C here) and `TETHER_PROMPT_KERNEL` does not say `ggml`.
fn enabled() -> bool {
    match MODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var("TETHER_PROMPT_KERNEL").as_deref() != Ok("ggml")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            MODE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// ggml's entry to its tiled kernels, reached through the linker's `--wrap`: C (`n` rows of
/// `m`, `ldc` apart) = B (`n` rows of `k` blocks) times Aᵀ (`m` rows of `k` blocks), split
/// among ggml's `nth` threads, each of which calls this with its own `ith`. Returns whether
/// the product was computed; ggml falls back to its dot products when not.
///
/// # Safety
/// ggml's contract for `llamafile_sgemm`: the pointers hold matrices of the stated types and
/// shapes, and every thread of the product calls with the same arguments but its `ith`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_llamafile_sgemm(
    params: *const ComputeParams,
    m: i64,
    n: i64,
    k: i64,
    a: *const c_void,
    lda: i64,
    b: *const c_void,
    ldb: i64,
    c: *mut c_void,
    ldc: i64,
    atype: c_int,
    btype: c_int,
    ctype: c_int,
) -> bool {
    // A single token's product (generation) stays ggml's, as it does for ggml's own kernels.
    let ours = atype == GGML_TYPE_Q4_1
        && btype == GGML_TYPE_Q8_1
        && ctype == GGML_TYPE_F32
        && n >= 2
        && m > 0
        && k > 0
        && enabled();
    if !ours {
        // SAFETY: the same arguments ggml passed, to ggml's own function.
        return unsafe {
            __real_llamafile_sgemm(params, m, n, k, a, lda, b, ldb, c, ldc, atype, btype, ctype)
        };
    }
    // SAFETY: ggml's contract, as stated above; the shapes are positive (checked above).
    unsafe {
        let (ith, nth) = ((*params).ith, (*params).nth);
        let shape = Shape {
            m: m as usize,
            n: n as usize,
            k: k as usize,
            lda: lda as usize,
            ldb: ldb as usize,
            ldc: ldc as usize,
        };
        gemm(
            ith.max(0) as usize,
            nth.max(1) as usize,
            shape,
            a.cast(),
            b.cast(),
            c.cast(),
        );
        if ith == 0 {
            PRODUCTS.fetch_add(1, Ordering::Relaxed);
        }
    }
    true
}

/// A product's sizes: `m` weight rows, `n` prompt rows, `k` blocks in each, and the strides
/// (in blocks for A and B, in floats for C).
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) lda: usize,
    pub(crate) ldb: usize,
    pub(crate) ldc: usize,
}

/// Thread `ith` of `nth`'s share of C: a contiguous run of four-row tiles.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `a`, `b` and `c` hold the matrices `shape` describes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm(
    ith: usize,
    nth: usize,
    shape: Shape,
    a: *const BlockQ4_1,
    b: *const BlockQ8_1,
    c: *mut f32,
) {
    let Shape { m, n, k, .. } = shape;
    let row_tiles = m.div_ceil(ROWS);
    let (first, last) = (row_tiles * ith / nth, row_tiles * (ith + 1) / nth);
    if first >= last {
        return;
    }
    let col_tiles = n.div_ceil(COLS);
    // The prompt's scales as floats, two tokens side by side per block, so that one 64-bit
    // broadcast lays them out as the tile's lanes want them. A missing last token repeats the
    // one before (its outputs are not stored).
    let mut b_d = vec![0f32; col_tiles * k * COLS];
    let mut b_s = vec![0f32; col_tiles * k * COLS];
    for tile in 0..col_tiles {
        for col in 0..COLS {
            let j = (tile * COLS + col).min(n - 1);
            for ib in 0..k {
                // SAFETY: j < n and ib < k.
                let block = unsafe { &*b.add(j * shape.ldb + ib) };
                b_d[(tile * k + ib) * COLS + col] = half(block.d);
                b_s[(tile * k + ib) * COLS + col] = half(block.s);
            }
        }
    }
    // The weights' scales and minimums as floats, one per lane, per block.
    let mut a_d = vec![0f32; k * LANES];
    let mut a_m = vec![0f32; k * LANES];
    for tile in first..last {
        let rows: [usize; ROWS] = std::array::from_fn(|r| (tile * ROWS + r).min(m - 1));
        for ib in 0..k {
            for (r, &i) in rows.iter().enumerate() {
                // SAFETY: i < m and ib < k.
                let block = unsafe { &*a.add(i * shape.lda + ib) };
                let (d, min) = (half(block.d), half(block.m));
                for col in 0..COLS {
                    a_d[ib * LANES + r * COLS + col] = d;
                    a_m[ib * LANES + r * COLS + col] = min;
                }
            }
        }
        let a_rows: [*const BlockQ4_1; ROWS] =
            std::array::from_fn(|r| a.wrapping_add(rows[r] * shape.lda));
        for col_tile in 0..col_tiles {
            let cols: [usize; COLS] = std::array::from_fn(|c| (col_tile * COLS + c).min(n - 1));
            let b_cols: [*const BlockQ8_1; COLS] =
                std::array::from_fn(|c| b.wrapping_add(cols[c] * shape.ldb));
            let scales = TileScales {
                a_d: &a_d,
                a_m: &a_m,
                b_d: &b_d[col_tile * k * COLS..(col_tile + 1) * k * COLS],
                b_s: &b_s[col_tile * k * COLS..(col_tile + 1) * k * COLS],
            };
            // SAFETY: the rows and columns are within the matrices.
            let out = unsafe { tile_sums(k, a_rows, b_cols, scales) };
            for (r, &i) in rows.iter().enumerate() {
                if tile * ROWS + r >= m {
                    break;
                }
                for (col, &j) in cols.iter().enumerate() {
                    if col_tile * COLS + col < n {
                        // SAFETY: i < m and j < n.
                        unsafe { *c.add(j * shape.ldc + i) = out[r * COLS + col] };
                    }
                }
            }
        }
    }
}

/// A tile's scales as floats, `k` blocks of lanes (`a_*`) and of token pairs (`b_*`).
struct TileScales<'a> {
    a_d: &'a [f32],
    a_m: &'a [f32],
    b_d: &'a [f32],
    b_s: &'a [f32],
}

/// The tile's eight outputs, lane `row * COLS + col`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; each row and column pointer holds `k` blocks; the scales
/// hold `k` blocks each.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_sums(
    k: usize,
    a_rows: [*const BlockQ4_1; ROWS],
    b_cols: [*const BlockQ8_1; COLS],
    scales: TileScales<'_>,
) -> [f32; LANES] {
    debug_assert!(scales.a_d.len() >= k * LANES && scales.b_d.len() >= k * COLS);
    let ones = _mm256_set1_epi16(1);
    let low = _mm256_set1_epi8(0x0f);
    let mut acc = [[_mm256_setzero_ps(); COLS]; ROWS];
    // ggml's scalar sum of minimum × token sum, one per output, as lanes: the same fused
    // multiply-add in the same order, eight at once.
    let mut mins = _mm256_setzero_ps();
    let mut products = [0f32; LANES];
    for ib in 0..k {
        // SAFETY: ib < k, within every row, column and scale slice (the caller's promise).
        unsafe {
            let pair = scales.b_d.as_ptr().add(ib * COLS).cast::<f64>();
            let b_d = _mm256_castpd_ps(_mm256_broadcast_sd(&*pair));
            let pair = scales.b_s.as_ptr().add(ib * COLS).cast::<f64>();
            let b_s = _mm256_castpd_ps(_mm256_broadcast_sd(&*pair));
            let a_d = _mm256_loadu_ps(scales.a_d.as_ptr().add(ib * LANES));
            let a_m = _mm256_loadu_ps(scales.a_m.as_ptr().add(ib * LANES));
            mins = _mm256_fmadd_ps(a_m, b_s, mins);
            _mm256_storeu_ps(products.as_mut_ptr(), _mm256_mul_ps(a_d, b_d));
            let qy: [__m256i; COLS] = std::array::from_fn(|c| {
                _mm256_loadu_si256((*b_cols[c].add(ib)).qs.as_ptr().cast::<__m256i>())
            });
            for (r, row) in a_rows.iter().enumerate() {
                let packed = _mm_loadu_si128((*row.add(ib)).qs.as_ptr().cast::<__m128i>());
                let qx =
                    _mm256_and_si256(low, _mm256_set_m128i(_mm_srli_epi16::<4>(packed), packed));
                for c in 0..COLS {
                    let dot = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(qx, qy[c]));
                    let scale = _mm256_set1_ps(products[r * COLS + c]);
                    acc[r][c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), acc[r][c]);
                }
            }
        }
    }
    let mut minimums = [0f32; LANES];
    // SAFETY: a store of eight floats into eight.
    unsafe { _mm256_storeu_ps(minimums.as_mut_ptr(), mins) };
    std::array::from_fn(|lane| hsum(acc[lane / COLS][lane % COLS]) + minimums[lane])
}

/// ggml's `hsum_float_8`: high half plus low half, then the pairs, then the last two.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum(x: __m256) -> f32 {
    let mut res = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

/// An IEEE half's value (exact: every half is a float).
#[target_feature(enable = "f16c")]
#[inline]
fn half(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[cfg(test)]
mod tests;
