//! llama.cpp's prompt products over Q4_1 weights, tiled. ggml has a tiled kernel (llamafile's
//! tinyBLAS) for Q8_0, Q4_0 and float weights, but multiplies Q4_1 weights, the default model's,
//! one dot product per call: every call unpacks its weight row again, reloads the prompt's row
//! and sums its eight lanes. Here eight prompt tokens share each load and unpacking of a
//! weight row, and the sums stay in registers (docs/decisions.md, "A tiled kernel for Q4_1
//! prompts").
//!
//! Every output is the float ggml's own AVX2 dot product (`ggml_vec_dot_q4_1_q8_1`) gives, bit
//! for bit: each of a tile's eight outputs keeps its own eight-lane accumulator and sum of the
//! minimums, fed block after block in ggml's order with ggml's fused operations, and summed
//! across lanes the way ggml sums them. So answers cannot change, only their speed; a unit test
//! holds it to that against ggml's own function.
//!
//! The hook is the linker's: the binaries that link llama.cpp are linked with
//! `--wrap=llamafile_sgemm` (`link.rs`, included by the build scripts of tether-local, tether
//! and this crate), so ggml's call to its tiled kernels reaches [`__wrap_llamafile_sgemm`],
//! which takes Q4_1 products of a tile's tokens or more and hands every other one to ggml's
//! own (`__real_llamafile_sgemm`). llama.cpp's source stays as
//! published. `TETHER_PROMPT_KERNEL=ggml` leaves every product to ggml, for comparisons.
//!
//! ggml's threads split a product by rows; when ggml runs one thread and the helper is on
//! (`crate::helper`), the product is cut into chunks of rows that the helper thread takes
//! some of (`shared`). Either way each output is computed by the same code.

use std::arch::x86_64::*;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::helper::Pieces;

/// ggml's type numbers (ggml.h, `enum ggml_type`): floats.
pub const GGML_TYPE_F32: c_int = 0;
/// ggml's number for Q4_1 weights.
pub const GGML_TYPE_Q4_1: c_int = 3;
/// ggml's number for Q8_1, the prompt's form for a product with Q4_1 weights.
pub const GGML_TYPE_Q8_1: c_int = 9;

/// Prompt tokens in one tile, against one weight row at a time: the eight sums, the sum of
/// the minimums, the row's unpacked weights, two constants and three temporaries fit AVX2's
/// sixteen registers, and the tokens' blocks and combined scales are read by the
/// instructions themselves, so nothing is spilled (two rows by four tokens spilled four sums
/// a block; docs/decisions.md).
const COLS: usize = 8;

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
    /// This thread's number, from 0.
    pub ith: c_int,
    /// How many threads share the product.
    pub nth: c_int,
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
    // Fewer tokens than a tile (generation, a short draft) stay ggml's: a tile's missing
    // tokens would be computed for nothing.
    let ours = atype == GGML_TYPE_Q4_1
        && btype == GGML_TYPE_Q8_1
        && ctype == GGML_TYPE_F32
        && n >= COLS as i64
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
        if nth <= 1 && crate::helper::helper_on() {
            shared::gemm_shared(shape, a.cast(), b.cast(), c.cast());
        } else {
            gemm(
                ith.max(0) as usize,
                nth.max(1) as usize,
                shape,
                a.cast(),
                b.cast(),
                c.cast(),
            );
        }
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

/// Thread `ith` of `nth`'s share of C: a contiguous run of the product's chunks of weight
/// rows against every token ([`shared::Product`], the same work the helper thread shares).
/// Every tile of tokens is copied first; then the rows, a chunk at a time, are unpacked once
/// and meet each tile in turn: a tile (a few kilobytes) stays in the first cache level while
/// the chunk's rows pass, and the chunk (tens of kilobytes) in the second.
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
    let chunks = shape.m.div_ceil(shared::CHUNK_ROWS);
    let mine = chunks * ith / nth..chunks * (ith + 1) / nth;
    if mine.is_empty() {
        return;
    }
    // SAFETY: the caller's promise, and this thread returns only once its chunks are done.
    let product = unsafe { shared::Product::new(shape, a, b, c) };
    let mut rows = product.scratch(true);
    for chunk in mine {
        product.compute(chunk, &mut rows);
    }
}

/// One tile's tokens copied into aligned vectors, block after block: each token's quants,
/// the tokens' scales side by side, and their sums side by side. ggml's blocks are 36 bytes
/// apart, so nearly half of the loads straight from them would cross a cache line. A missing
/// last token repeats the one before (its outputs are not stored).
pub(crate) struct TokenTile {
    /// The tile's first token.
    first: usize,
    /// Its tokens, `COLS` but for the last tile.
    count: usize,
    b_q: Vec<__m256i>,
    b_d: Vec<__m256>,
    b_s: Vec<__m256>,
}

impl TokenTile {
    /// An empty tile for tokens of `k` blocks.
    pub(crate) fn new(k: usize) -> Self {
        TokenTile {
            first: 0,
            count: 0,
            b_q: vec![zero(); k * COLS],
            b_d: vec![zero(); k],
            b_s: vec![zero(); k],
        }
    }

    /// Holds the tokens of tile `col_tile` of B.
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C; `b` holds the tokens `shape` describes, and the tile was
    /// made for its `k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn fill(&mut self, shape: Shape, b: *const BlockQ8_1, col_tile: usize) {
        let (n, k) = (shape.n, shape.k);
        self.first = col_tile * COLS;
        self.count = COLS.min(n - self.first);
        let cols: [usize; COLS] = std::array::from_fn(|c| (self.first + c).min(n - 1));
        for ib in 0..k {
            let (mut ds, mut sums) = ([0f32; COLS], [0f32; COLS]);
            for (col, &j) in cols.iter().enumerate() {
                // SAFETY: j < n and ib < k.
                let block = unsafe { &*b.add(j * shape.ldb + ib) };
                // SAFETY: 32 bytes read from a block's 32 quants.
                self.b_q[ib * COLS + col] =
                    unsafe { _mm256_loadu_si256(block.qs.as_ptr().cast::<__m256i>()) };
                ds[col] = half(block.d);
                sums[col] = half(block.s);
            }
            // SAFETY: eight floats read from eight, twice.
            unsafe {
                self.b_d[ib] = _mm256_loadu_ps(ds.as_ptr());
                self.b_s[ib] = _mm256_loadu_ps(sums.as_ptr());
            }
        }
    }
}

/// A run of weight rows, unpacked once for every tile they meet: per row and block, the 32
/// weights a byte each, and the scale and minimum as floats; and room for one row's
/// combined scales against a tile.
pub(crate) struct UnpackedRows {
    k: usize,
    /// The run's first row.
    first: usize,
    /// Its rows.
    count: usize,
    a_q: Vec<__m256i>,
    a_d: Vec<f32>,
    a_m: Vec<f32>,
    scales: Vec<__m256>,
}

impl UnpackedRows {
    /// Room for rows of `k` blocks.
    pub(crate) fn new(k: usize) -> Self {
        UnpackedRows {
            k,
            first: 0,
            count: 0,
            a_q: Vec::new(),
            a_d: Vec::new(),
            a_m: Vec::new(),
            scales: vec![zero(); k],
        }
    }

    /// Holds rows `first..last` of A.
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C; `a` holds the rows `shape` describes and
    /// `last <= shape.m`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn fill(
        &mut self,
        shape: Shape,
        a: *const BlockQ4_1,
        first: usize,
        last: usize,
    ) {
        let k = self.k;
        self.first = first;
        self.count = last - first;
        self.a_q.resize(self.count * k, zero());
        self.a_d.resize(self.count * k, 0.0);
        self.a_m.resize(self.count * k, 0.0);
        let low = _mm256_set1_epi8(0x0f);
        for row in 0..self.count {
            for ib in 0..k {
                // SAFETY: first + row < last <= m and ib < k.
                let block = unsafe { &*a.add((first + row) * shape.lda + ib) };
                // ggml's `bytes_from_nibbles_32`: the low nibbles are the first 16 weights.
                // SAFETY: 16 bytes read from a block's 16.
                let packed = unsafe { _mm_loadu_si128(block.qs.as_ptr().cast::<__m128i>()) };
                self.a_q[row * k + ib] =
                    _mm256_and_si256(low, _mm256_set_m128i(_mm_srli_epi16::<4>(packed), packed));
                self.a_d[row * k + ib] = half(block.d);
                self.a_m[row * k + ib] = half(block.m);
            }
        }
    }
}

/// C's outputs for the rows `rows` holds against the tokens `tile` holds.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `c` holds the matrix `shape` describes, and `rows` and
/// `tile` were filled from this product's A and B.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_against_tile(
    shape: Shape,
    c: *mut f32,
    rows: &mut UnpackedRows,
    tile: &TokenTile,
) {
    let k = shape.k;
    for row in 0..rows.count {
        let i = rows.first + row;
        // The row's scale times each token's, per block: ggml's combined scale, a float each
        // fused multiply-add reads from memory.
        for ib in 0..k {
            rows.scales[ib] = _mm256_mul_ps(_mm256_set1_ps(rows.a_d[row * k + ib]), tile.b_d[ib]);
        }
        let sums = Tile {
            a_q: &rows.a_q[row * k..(row + 1) * k],
            a_m: &rows.a_m[row * k..(row + 1) * k],
            b_q: &tile.b_q,
            scales: &rows.scales,
            b_s: &tile.b_s,
        };
        // SAFETY: the row's blocks and the tile's hold k blocks each.
        let out = unsafe { tile_sums(k, &sums) };
        for (col, &value) in out.iter().enumerate().take(tile.count) {
            // SAFETY: i < m and the tile's token is below n.
            unsafe { *c.add((tile.first + col) * shape.ldc + i) = value };
        }
    }
}

/// A tile for `k` blocks: per block, the row's unpacked weights (`a_q`) and minimum (`a_m`),
/// each token's quants (`b_q`), the row's scale times each token's (`scales`) and the
/// tokens' sums (`b_s`).
struct Tile<'a> {
    a_q: &'a [__m256i],
    a_m: &'a [f32],
    b_q: &'a [__m256i],
    scales: &'a [__m256],
    b_s: &'a [__m256],
}

/// The row's products with the tile's eight tokens.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; the row holds `k` blocks, and so does the tile.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
unsafe fn tile_sums(k: usize, tile: &Tile<'_>) -> [f32; COLS] {
    debug_assert!(tile.a_m.len() >= k && tile.b_s.len() >= k && tile.scales.len() >= k);
    debug_assert!(tile.a_q.len() >= k && tile.b_q.len() >= k * COLS);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); COLS];
    // ggml's scalar sum of minimum × token sum, one per output, as lanes: the same fused
    // multiply-add in the same order, eight at once.
    let mut mins = _mm256_setzero_ps();
    let (mut a_q, mut a_m) = (tile.a_q.as_ptr(), tile.a_m.as_ptr());
    let (mut b_q, mut b_s) = (tile.b_q.as_ptr(), tile.b_s.as_ptr());
    let mut scales = tile.scales.as_ptr().cast::<f32>();
    for _ in 0..k {
        // SAFETY: one block of k along the row and the tile (the caller's promise); each
        // pointer moves on by one block after it.
        unsafe {
            mins = _mm256_fmadd_ps(_mm256_broadcast_ss(&*a_m), *b_s, mins);
            let qx = *a_q;
            for (c, acc) in acc.iter_mut().enumerate() {
                let dot = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(qx, *b_q.add(c)));
                // ggml's own step: (d0 × d1) × dot added to the lanes, fused.
                let scale = _mm256_broadcast_ss(&*scales.add(c));
                *acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), *acc);
            }
            a_q = a_q.add(1);
            a_m = a_m.add(1);
            b_q = b_q.add(COLS);
            scales = scales.add(COLS);
            b_s = b_s.add(1);
        }
    }
    let mut minimums = [0f32; COLS];
    // SAFETY: a store of eight floats into eight.
    unsafe { _mm256_storeu_ps(minimums.as_mut_ptr(), mins) };
    std::array::from_fn(|col| hsum(acc[col]) + minimums[col])
}

/// A vector of zero bits, which needs no CPU feature to make.
fn zero<T: VectorOfBits>() -> T {
    // SAFETY: every bit pattern is a valid vector (`VectorOfBits` is only implemented for
    // AVX's plain vector types).
    unsafe { std::mem::zeroed() }
}

/// AVX's vector types: plain bits, any pattern of which is a value.
trait VectorOfBits {}
impl VectorOfBits for __m256 {}
impl VectorOfBits for __m256i {}

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

pub(crate) mod shared;
#[cfg(test)]
mod tests;
