//! AVX-512 VNNI: `vpdpbusd` sums four byte products into each of sixteen i32 lanes.

use std::arch::x86_64::*;

use super::{PANEL, PANEL_STEP, ROWS};

/// The integer sums of `count` (1 to 6) rows with one panel, four 16-lane VNNI
/// accumulators per row.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI; `x` holds `count` rows of `width` bytes and
/// `weights` `width / 4` steps of 256 bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn panel(
    x: &[u8],
    width: usize,
    count: usize,
    weights: &[i8],
    sums: &mut [[i32; PANEL]; ROWS],
) {
    debug_assert!(x.len() >= count * width && weights.len() >= width / 4 * PANEL_STEP);
    // SAFETY: as the caller promised; each const instance reads `R` rows.
    unsafe {
        match count {
            1 => rows::<1>(x, width, weights, sums),
            2 => rows::<2>(x, width, weights, sums),
            3 => rows::<3>(x, width, weights, sums),
            4 => rows::<4>(x, width, weights, sums),
            5 => rows::<5>(x, width, weights, sums),
            _ => rows::<6>(x, width, weights, sums),
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn rows<const R: usize>(
    x: &[u8],
    width: usize,
    weights: &[i8],
    sums: &mut [[i32; PANEL]; ROWS],
) {
    let mut acc = [[_mm512_setzero_si512(); 4]; R];
    let x = x.as_ptr();
    let w = weights.as_ptr();
    for group in 0..width / 4 {
        // SAFETY: group < width / 4, so these reads stay inside the panel and the rows.
        unsafe {
            let step = w.add(group * PANEL_STEP);
            let w0 = _mm512_loadu_si512(step.cast());
            let w1 = _mm512_loadu_si512(step.add(64).cast());
            let w2 = _mm512_loadu_si512(step.add(128).cast());
            let w3 = _mm512_loadu_si512(step.add(192).cast());
            for (r, a) in acc.iter_mut().enumerate() {
                let four = x.add(r * width + group * 4).cast::<i32>().read_unaligned();
                let inputs = _mm512_set1_epi32(four);
                a[0] = _mm512_dpbusd_epi32(a[0], inputs, w0);
                a[1] = _mm512_dpbusd_epi32(a[1], inputs, w1);
                a[2] = _mm512_dpbusd_epi32(a[2], inputs, w2);
                a[3] = _mm512_dpbusd_epi32(a[3], inputs, w3);
            }
        }
    }
    for (a, out) in acc.iter().zip(sums.iter_mut()) {
        for (block, v) in a.iter().enumerate() {
            // SAFETY: each block is 16 i32 of the row's 64.
            unsafe { _mm512_storeu_si512(out[block * 16..].as_mut_ptr().cast(), *v) };
        }
    }
}
