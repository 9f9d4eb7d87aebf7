//! AVX2 without VNNI: `vpmaddubsw` multiplies 32 byte pairs (unsigned by signed) and adds
//! them two by two into i16, `vpmaddwd` against ones adds those pairs into a column's i32.
//! The i16 step is exact only while a pair's sum fits: 255 × 127 twice does not, so the
//! inputs are taken 128 lower (−128..127) and the unsigned side is their magnitude, at most
//! 128, with the sign moved onto the weights (`vpsignb`); 128 × each column's weight sum adds
//! the offset back. Two rows share each load of the weights. The same sums as every other
//! kernel; about twice the speed of widening every weight to i16 for every row, which this
//! kernel replaced (docs/decisions.md).

use std::arch::x86_64::*;

use super::{PANEL, PANEL_STEP, ROWS, affine, quantize_values};

/// Rows one pass over a half panel works on: four accumulators a row, and the eight of two
/// rows leave room in AVX2's sixteen registers for the four columns, the inputs and the ones
/// (three rows spilled).
const PASS_ROWS: usize = 2;

/// The integer sums of `count` rows with one panel whose columns' weights sum to
/// `w_sums`.
///
/// # Safety
/// The CPU must have AVX2; `x` holds `count` rows of `width` bytes and `weights` `width / 4`
/// steps of 256 bytes.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn panel(
    x: &[u8],
    width: usize,
    count: usize,
    weights: &[i8],
    w_sums: &[i32; PANEL],
    sums: &mut [[i32; PANEL]; ROWS],
) {
    debug_assert!(x.len() >= count * width && weights.len() >= width / 4 * PANEL_STEP);
    let mut first = 0;
    while first < count {
        let rows = (count - first).min(PASS_ROWS);
        let x = &x[first * width..(first + rows) * width];
        let out = &mut sums[first..first + rows];
        for half in 0..2 {
            // SAFETY: as the caller promised, for `rows` of the rows.
            unsafe {
                match rows {
                    1 => half_panel::<1>(x, width, weights, half, w_sums, out),
                    2 => half_panel::<2>(x, width, weights, half, w_sums, out),
                    _ => half_panel::<3>(x, width, weights, half, w_sums, out),
                }
            }
        }
        first += rows;
    }
}

/// The sums of `R` rows with one half (32 columns) of the panel.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn half_panel<const R: usize>(
    x: &[u8],
    width: usize,
    weights: &[i8],
    half: usize,
    w_sums: &[i32; PANEL],
    sums: &mut [[i32; PANEL]],
) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 4]; R];
    let x = x.as_ptr();
    let w = weights.as_ptr();
    for group in 0..width / 4 {
        // SAFETY: group < width / 4, so the rows' four bytes and the half's 128 bytes of
        // the step stay inside what the caller passed.
        unsafe {
            let step = w.add(group * PANEL_STEP + half * 128);
            for (r, a) in acc.iter_mut().enumerate() {
                let four = x.add(r * width + group * 4).cast::<u32>().read_unaligned();
                // Each input less 128, as i8, four of them repeated across the register.
                let inputs = _mm256_set1_epi32((four ^ 0x8080_8080) as i32);
                let magnitudes = _mm256_abs_epi8(inputs);
                for (j, a) in a.iter_mut().enumerate() {
                    let columns = _mm256_loadu_si256(step.add(j * 32).cast());
                    let pairs = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(columns, inputs));
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(pairs, ones));
                }
            }
        }
    }
    // SAFETY: eight i32 from the column sums, at most 32 + 24 + 8 = 64 of them.
    let offsets: [__m256i; 4] = std::array::from_fn(|j| unsafe {
        _mm256_slli_epi32(
            _mm256_loadu_si256(w_sums[half * 32 + j * 8..].as_ptr().cast()),
            7,
        )
    });
    for (a, out) in acc.iter().zip(sums.iter_mut()) {
        for (j, v) in a.iter().enumerate() {
            // SAFETY: eight i32 lanes into eight of the row's 64.
            unsafe {
                _mm256_storeu_si256(
                    out[half * 32 + j * 8..].as_mut_ptr().cast(),
                    _mm256_add_epi32(*v, offsets[j]),
                );
            }
        }
    }
}

/// `quantize_row` of the parent module (the row's range, then each value to u8) eight values
/// to a register: the same arithmetic (a multiply and an add, unfused; rounding to nearest,
/// ties to even, as the scalar code's 2^23 trick does), so the same bytes, with the four
/// registers of 32 values packed into one store.
///
/// # Safety
/// The CPU must have AVX2; `out` is at least as long as `row`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_row(row: &[f32], out: &mut [u8]) -> (f32, i32) {
    debug_assert!(out.len() >= row.len());
    // The range in AVX2's min and max: `math::min_max` compiled here instead made the whole
    // quantisation of a query 324 µs against 68 (the compiler keeps its lanes in memory).
    let (chunks, rest) = row.as_chunks::<8>();
    let mut low = _mm256_set1_ps(f32::INFINITY);
    let mut high = _mm256_set1_ps(f32::NEG_INFINITY);
    for chunk in chunks {
        // SAFETY: a chunk is eight floats, one unaligned load.
        let v = unsafe { _mm256_loadu_ps(chunk.as_ptr()) };
        // `v < low ? v : low`, as the plain loop compares.
        low = _mm256_min_ps(v, low);
        high = _mm256_max_ps(v, high);
    }
    let mut lows = [0f32; 8];
    let mut highs = [0f32; 8];
    // SAFETY: eight floats each, unaligned stores.
    unsafe {
        _mm256_storeu_ps(lows.as_mut_ptr(), low);
        _mm256_storeu_ps(highs.as_mut_ptr(), high);
    }
    let smallest = lows
        .iter()
        .chain(rest)
        .fold(f32::INFINITY, |a, &b| if b < a { b } else { a });
    let largest = highs
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    let (scale, zero) = affine((smallest, largest));
    let inverse = 1.0 / scale;
    let (inverse_v, zero_v) = (_mm256_set1_ps(inverse), _mm256_set1_ps(zero));
    let (floor, ceiling) = (_mm256_setzero_ps(), _mm256_set1_ps(255.0));
    // After the two packs, the 32-bit groups hold values 0–3 of each register, then 4–7.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let (blocks, _) = row.as_chunks::<32>();
    for (b, block) in blocks.iter().enumerate() {
        let eight = |k: usize| {
            // SAFETY: eight floats of the block, one unaligned load.
            let v = unsafe { _mm256_loadu_ps(block[k * 8..].as_ptr()) };
            let v = _mm256_add_ps(_mm256_mul_ps(v, inverse_v), zero_v);
            // Clamped as `f32::clamp` does (a NaN becomes 0, as the scalar code's bits give),
            // then rounded.
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, floor), ceiling))
        };
        let low_half = _mm256_packs_epi32(eight(0), eight(1));
        let high_half = _mm256_packs_epi32(eight(2), eight(3));
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(low_half, high_half), order);
        // SAFETY: 32 bytes at b * 32, inside `out`, which is as long as `row`.
        unsafe { _mm256_storeu_si256(out[b * 32..].as_mut_ptr().cast(), bytes) };
    }
    let done = blocks.len() * 32;
    quantize_values(&row[done..], &mut out[done..], inverse, zero);
    (scale, zero as i32)
}
