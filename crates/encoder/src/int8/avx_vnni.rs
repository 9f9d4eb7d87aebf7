//! AVX-VNNI: VNNI's byte dot products on 256-bit registers, eight per row per step.

use std::arch::x86_64::*;

use super::{PANEL, PANEL_STEP, ROWS};

/// The integer sums of `count` rows with one panel, a row at a time.
///
/// # Safety
/// The CPU must have AVX2 and AVX-VNNI; `x` holds `count` rows of `width` bytes and
/// `weights` `width / 4` steps of 256 bytes.
#[target_feature(enable = "avx2,avxvnni")]
pub(super) unsafe fn panel(
    x: &[u8],
    width: usize,
    count: usize,
    weights: &[i8],
    sums: &mut [[i32; PANEL]; ROWS],
) {
    debug_assert!(x.len() >= count * width && weights.len() >= width / 4 * PANEL_STEP);
    let w = weights.as_ptr();
    for (r, row_sums) in sums.iter_mut().enumerate().take(count) {
        let row = &x[r * width..(r + 1) * width];
        let mut acc = [_mm256_setzero_si256(); 8];
        for (group, four) in row.chunks_exact(4).enumerate() {
            let inputs =
                _mm256_set1_epi32(i32::from_le_bytes([four[0], four[1], four[2], four[3]]));
            // SAFETY: group < width / 4, and 8 × 32 bytes are the step's 256.
            unsafe {
                let step = w.add(group * PANEL_STEP);
                for (j, acc) in acc.iter_mut().enumerate() {
                    let columns = _mm256_loadu_si256(step.add(j * 32).cast());
                    *acc = _mm256_dpbusd_avx_epi32(*acc, inputs, columns);
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            // SAFETY: eight i32 lanes into eight of the row's 64.
            unsafe { _mm256_storeu_si256(row_sums[j * 8..].as_mut_ptr().cast(), *acc) };
        }
    }
}
