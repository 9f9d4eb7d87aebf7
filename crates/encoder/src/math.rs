//! The encoder's element-wise work in forms the compiler vectorises: sixteen independent lanes
//! where a sum runs over a row (float sums cannot be reordered otherwise), and erf and exp as
//! polynomials rather than calls into libm, which run one value at a time.

const LANES: usize = 16;

/// Defines a function whose body is compiled three times: for AVX-512, for AVX2 with FMA and
/// for the baseline, the first the CPU has being run. The body's loops then vectorise as wide
/// as the machine allows (helpers marked `#[inline(always)]` are compiled into each), and
/// `mul_add` is one instruction (on the x86-64 baseline it is a library call: correct, slow,
/// and only on CPUs from before 2013).
macro_rules! with_wide_vectors {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) $body
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $body
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the feature `avx512` is compiled for was just detected.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the features `avx2` is compiled for were just detected.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body
        }
    };
}

/// The lanes of `v` folded by `f` in halves (8 pairs, 4, 2, 1): a few vector steps where a
/// left-to-right fold is a chain of sixteen dependent ones.
#[inline(always)]
fn fold_lanes(mut v: [f32; LANES], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            v[i] = f(v[i], v[i + width]);
        }
        width /= 2;
    }
    v[0]
}

/// The smallest and largest value of `x`.
#[inline(always)]
pub(crate) fn min_max(x: &[f32]) -> (f32, f32) {
    // Plain comparisons on independent lanes, which map onto vector min and max; `f32::min`'s
    // NaN rule does not.
    let (chunks, rest) = x.as_chunks::<LANES>();
    let mut low = [f32::INFINITY; LANES];
    let mut high = [f32::NEG_INFINITY; LANES];
    for chunk in chunks {
        for ((l, h), &c) in low.iter_mut().zip(high.iter_mut()).zip(chunk) {
            *l = if c < *l { c } else { *l };
            *h = if c > *h { c } else { *h };
        }
    }
    let smaller = |a: f32, b: f32| if b < a { b } else { a };
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let (mut small, mut large) = (fold_lanes(low, smaller), fold_lanes(high, larger));
    for &c in rest {
        small = smaller(small, c);
        large = larger(large, c);
    }
    (small, large)
}

/// [`min_max`] in AVX-512 instructions: the compiler's vectorisation of the plain loop differs
/// from build to build (in the binary it once spent 11% of an encoding there).
///
/// # Safety
/// The CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn min_max_avx512(x: &[f32]) -> (f32, f32) {
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_max_ps, _mm512_min_ps, _mm512_set1_ps};
    use std::arch::x86_64::{_mm512_reduce_max_ps, _mm512_reduce_min_ps};
    let (chunks, rest) = x.as_chunks::<LANES>();
    let mut low = _mm512_set1_ps(f32::INFINITY);
    let mut high = _mm512_set1_ps(f32::NEG_INFINITY);
    for chunk in chunks {
        // SAFETY: a chunk is sixteen floats, one unaligned load.
        let v = unsafe { _mm512_loadu_ps(chunk.as_ptr()) };
        low = _mm512_min_ps(low, v);
        high = _mm512_max_ps(high, v);
    }
    let (mut small, mut large) = (_mm512_reduce_min_ps(low), _mm512_reduce_max_ps(high));
    for &c in rest {
        small = small.min(c);
        large = large.max(c);
    }
    (small, large)
}

/// The sum of `x`.
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for l in 0..LANES {
            lanes[l] += chunk[l];
        }
    }
    fold_lanes(lanes, |a, b| a + b) + rest
}

/// The dot product of `a` and `b`.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let rest: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            lanes[l] += x[l] * y[l];
        }
    }
    fold_lanes(lanes, |a, b| a + b) + rest
}

with_wide_vectors! {
    /// Layer normalisation of each row of `x` (rows of `gain.len()`), in place.
    pub(crate) fn layer_norm(x: &mut [f32], gain: &[f32], bias: &[f32]) {
        let width = gain.len();
        for row in x.chunks_exact_mut(width) {
            let n = width as f32;
            let mean = sum(row) / n;
            row.iter_mut().for_each(|v| *v -= mean);
            let variance = dot(row, row) / n;
            let scale = 1.0 / (variance + 1e-12).sqrt();
            for ((v, g), b) in row.iter_mut().zip(gain).zip(bias) {
                *v = *v * scale * g + b;
            }
        }
    }
}

with_wide_vectors! {
    /// GELU as BERT defines it (with erf), in place.
    pub(crate) fn gelu(x: &mut [f32]) {
        for v in x {
            let e = erf_magnitude(v.abs() * std::f32::consts::FRAC_1_SQRT_2);
            let e = if *v < 0.0 { -e } else { e };
            *v = 0.5 * *v * (1.0 + e);
        }
    }
}

/// erf(t) for t ≥ 0 to within 3e-7 (Abramowitz and Stegun 7.1.28), without a branch or a
/// call: past t ≈ 4 the sixteenth power overflows to infinity and erf is 1.
#[inline(always)]
fn erf_magnitude(t: f32) -> f32 {
    let p = 1.0
        + t * (0.070_523_08
            + t * (0.042_282_01
                + t * (0.009_270_527
                    + t * (0.000_152_014_3 + t * (0.000_276_567_2 + t * 0.000_043_063_8)))));
    let p2 = p * p;
    let p4 = p2 * p2;
    let p8 = p4 * p4;
    1.0 - 1.0 / (p8 * p8)
}

with_wide_vectors! {
    /// Self-attention of one sequence of `n` tokens: `qkv` holds a row of queries, keys and values
    /// (3 × `width`) per token; each head (`head_width`, 32, columns) adds its softmax-weighted
    /// values into `context` (a row of `width` per token). `scratch` is reused between calls.
    ///
    /// The scores of a query against every key are summed a key dimension at a time over the keys
    /// laid out transposed (padded to whole lanes), sixteen keys per register, and each query's
    /// weighted values are summed in registers too: no horizontal sums, no loads and stores of
    /// partial sums. The keys are taken in groups of one, two or four registers, the fewest
    /// that hold them: a query of 22 tokens scored 64 keys, most of them padding, in groups of
    /// four, and attention took a tenth of its encoding.
    pub(crate) fn attention(
        qkv: &[f32],
        n: usize,
        width: usize,
        head_width: usize,
        context: &mut [f32],
        scratch: &mut Vec<f32>
    ) {
        debug_assert_eq!(head_width, 32);
        // The queries whose scores are summed together: enough accumulators that the
        // multiply-adds do not wait on each other, few enough to stay in sixteen registers.
        if n <= LANES {
            attend::<1, 4>(qkv, n, width, context, scratch);
        } else if n <= 2 * LANES {
            attend::<2, 2>(qkv, n, width, context, scratch);
        } else {
            attend::<4, 1>(qkv, n, width, context, scratch);
        }
    }
}

/// [`attention`] with the keys in groups of `ACC` registers of [`LANES`], each summed in its
/// own accumulator, the scores of `QUERIES` queries at a time: each key's load serves them
/// all, and their sums are independent chains (one query's four took 20 of a 22-token layer's
/// 45 µs, each multiply-add waiting on the last). Each score is the same sum, in the same
/// order, whatever the grouping.
#[inline(always)]
fn attend<const ACC: usize, const QUERIES: usize>(
    qkv: &[f32],
    n: usize,
    width: usize,
    context: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    const HEAD: usize = 32;
    let stride = 3 * width;
    let scale = 1.0 / (HEAD as f32).sqrt();
    let group = ACC * LANES;
    let padded = n.div_ceil(group) * group;
    scratch.clear();
    scratch.resize(HEAD * padded + (QUERIES + 1) * padded, 0.0);
    let (keys, rest) = scratch.split_at_mut(HEAD * padded);
    let (all_scores, mask) = rest.split_at_mut(QUERIES * padded);
    // Padding keys score far below any real one: the softmax then runs over whole
    // registers, and their weights (e^-87 at most) vanish beside the largest's 1.
    mask[n..].fill(-30_000.0);
    for head in 0..width / HEAD {
        let (q, k, v) = (head * HEAD, width + head * HEAD, 2 * width + head * HEAD);
        for j in 0..n {
            let key = &qkv[j * stride + k..j * stride + k + HEAD];
            for (d, &value) in key.iter().enumerate() {
                keys[d * padded + j] = value;
            }
        }
        for first in (0..n).step_by(QUERIES) {
            let query = |i: usize| -> &[f32; HEAD] {
                qkv.get(i * stride + q..i * stride + q + HEAD)
                    .and_then(|row| row.try_into().ok())
                    .unwrap_or(&[0.0; HEAD])
            };
            // Past the last query the rows are scored for nothing (a zero query).
            let queries: [&[f32; HEAD]; QUERIES] = std::array::from_fn(|r| query(first + r));
            for at in 0..padded / group {
                let mut acc = [[[0f32; LANES]; ACC]; QUERIES];
                for d in 0..HEAD {
                    let start = d * padded + at * group;
                    let (column, _) = keys[start..start + group].as_chunks::<LANES>();
                    for (acc, query) in acc.iter_mut().zip(&queries) {
                        let qd = query[d];
                        for (acc, column) in acc.iter_mut().zip(column) {
                            for l in 0..LANES {
                                acc[l] = qd.mul_add(column[l], acc[l]);
                            }
                        }
                    }
                }
                let (mask, _) = mask[at * group..(at + 1) * group].as_chunks::<LANES>();
                for (acc, scores) in acc.iter().zip(all_scores.chunks_exact_mut(padded)) {
                    let (out, _) = scores[at * group..(at + 1) * group].as_chunks_mut::<LANES>();
                    for ((acc, out), mask) in acc.iter().zip(out).zip(mask) {
                        for l in 0..LANES {
                            out[l] = acc[l].mul_add(scale, mask[l]);
                        }
                    }
                }
            }
            for (i, scores) in (first..n).zip(all_scores.chunks_exact_mut(padded)) {
                let (_, top) = min_max(scores);
                for s in scores.iter_mut() {
                    *s = exp_nonpositive(*s - top);
                }
                let inverse = 1.0 / sum(scores);
                let scores = &scores[..n];
                // Even and odd keys in separate sums, again so the additions can overlap.
                let (mut even, mut odd) = ([0f32; HEAD], [0f32; HEAD]);
                let value = |j: usize| &qkv[j * stride + v..j * stride + v + HEAD];
                let (pairs, last) = scores.as_chunks::<2>();
                for (pair, p) in pairs.iter().enumerate() {
                    let (a, b) = (value(2 * pair), value(2 * pair + 1));
                    for l in 0..HEAD {
                        even[l] = p[0].mul_add(a[l], even[l]);
                        odd[l] = p[1].mul_add(b[l], odd[l]);
                    }
                }
                if let [p] = last {
                    let a = value(n - 1);
                    for l in 0..HEAD {
                        even[l] = p.mul_add(a[l], even[l]);
                    }
                }
                let out = &mut context[i * width + q..i * width + q + HEAD];
                for l in 0..HEAD {
                    out[l] += (even[l] + odd[l]) * inverse;
                }
            }
        }
    }
}

/// e^x for x ≤ 0 to within a few parts in 10⁷: 2^(x log2 e) split into a power of two, set in
/// the exponent bits, and a polynomial for the fraction.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    // Rounds to the nearest integer without SSE4.1's roundps: adding 1.5 × 2^23 pushes the
    // fraction out of the mantissa.
    const ROUND: f32 = 12_582_912.0;
    let t = x.max(-87.0) * std::f32::consts::LOG2_E;
    let shifted = t + ROUND;
    let n = shifted - ROUND;
    let f = t - n;
    let p = 1.0
        + f * (std::f32::consts::LN_2
            + f * (0.240_226_5
                + f * (0.055_504_11
                    + f * (0.009_618_129 + f * (0.001_333_355 + f * 0.000_154_035_3)))));
    // n itself, read from the mantissa of `shifted` (an `as` conversion would not vectorise).
    let n = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    p * f32::from_bits(((n + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polynomials_match_libm() {
        for i in -150..=150 {
            let x = i as f32 / 50.0;
            let mut g = [x];
            gelu(&mut g);
            let exact = 0.5 * f64::from(x) * (1.0 + libm_erf(f64::from(x) / 2f64.sqrt()));
            assert!(
                (f64::from(g[0]) - exact).abs() < 1e-5,
                "gelu({x}) = {} vs {exact}",
                g[0]
            );
            if x <= 0.0 {
                let e = exp_nonpositive(x);
                assert!(
                    (e - x.exp()).abs() <= 1e-6 * x.exp().max(1e-30) + 1e-37,
                    "exp({x})"
                );
            }
        }
        assert_eq!(exp_nonpositive(-1000.0), exp_nonpositive(-87.0));
        let mut big = [100.0, -100.0, 0.0];
        gelu(&mut big);
        assert_eq!(big, [100.0, 0.0, 0.0]);
    }

    /// erf by its series (slow and exact enough to check against).
    fn libm_erf(x: f64) -> f64 {
        let mut term = x;
        let mut total = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            total += term / (2 * n + 1) as f64;
        }
        total * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn lane_sums_match_plain_ones() {
        let x: Vec<f32> = (0..389).map(|i| (i as f32 * 0.37).sin()).collect();
        let plain: f32 = x.iter().sum();
        assert!((sum(&x) - plain).abs() < 1e-4);
        assert!((dot(&x, &x) - x.iter().map(|v| v * v).sum::<f32>()).abs() < 1e-3);
        let (low, high) = min_max(&x);
        assert_eq!(low, x.iter().cloned().fold(f32::INFINITY, f32::min));
        assert_eq!(high, x.iter().cloned().fold(f32::NEG_INFINITY, f32::max));
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was just detected.
            assert_eq!(unsafe { min_max_avx512(&x) }, (low, high));
        }
    }

    /// Scoring several queries at a time gives each score the same sum in the same order as
    /// scoring them one by one: the same bits, for every length around the groupings' edges.
    #[test]
    fn queries_scored_together_give_the_same_bits_as_one_by_one() {
        const WIDTH: usize = 64;
        for n in [1, 2, 3, 5, 15, 16, 17, 22, 31, 32, 33] {
            let qkv: Vec<f32> = (0..n * 3 * WIDTH)
                .map(|i| (i as f32 * 0.291).cos())
                .collect();
            let run = |together: bool| {
                let mut context = vec![0f32; n * WIDTH];
                let mut scratch = Vec::new();
                match (n <= LANES, together) {
                    (true, true) => attend::<1, 4>(&qkv, n, WIDTH, &mut context, &mut scratch),
                    (true, false) => attend::<1, 1>(&qkv, n, WIDTH, &mut context, &mut scratch),
                    (false, true) => attend::<2, 2>(&qkv, n, WIDTH, &mut context, &mut scratch),
                    (false, false) => attend::<2, 1>(&qkv, n, WIDTH, &mut context, &mut scratch),
                }
                context.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
            };
            assert_eq!(run(true), run(false), "n {n}");
        }
    }

    #[test]
    fn attention_matches_a_plain_softmax_for_every_length() {
        const WIDTH: usize = 64;
        for n in [1, 2, 15, 16, 17, 22, 32, 33, 64, 65, 70] {
            let qkv: Vec<f32> = (0..n * 3 * WIDTH)
                .map(|i| (i as f32 * 0.173).sin())
                .collect();
            let mut context = vec![0f32; n * WIDTH];
            attention(&qkv, n, WIDTH, 32, &mut context, &mut Vec::new());
            let stride = 3 * WIDTH;
            for head in 0..WIDTH / 32 {
                for i in 0..n {
                    let q = &qkv[i * stride + head * 32..][..32];
                    let scores: Vec<f64> = (0..n)
                        .map(|j| {
                            let k = &qkv[j * stride + WIDTH + head * 32..][..32];
                            q.iter().zip(k).map(|(a, b)| f64::from(a * b)).sum::<f64>()
                                / 32f64.sqrt()
                        })
                        .collect();
                    let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for l in 0..32 {
                        let expected: f64 = (0..n)
                            .map(|j| {
                                weights[j] * f64::from(qkv[j * stride + 2 * WIDTH + head * 32 + l])
                            })
                            .sum::<f64>()
                            / total;
                        let got = f64::from(context[i * WIDTH + head * 32 + l]);
                        assert!((got - expected).abs() < 1e-5, "n {n}: {got} vs {expected}");
                    }
                }
            }
        }
    }
}
#[cfg(test)]
mod scratch_timing {
    #[test]
    fn time_attention() {
        let n = 22;
        let qkv: Vec<f32> = (0..n * 3 * 384).map(|i| (i as f32 * 0.173).sin()).collect();
        let mut context = vec![0f32; n * 384];
        let mut scratch = Vec::new();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            for _ in 0..1000 {
                super::attention(&qkv, n, 384, 32, &mut context, &mut scratch);
            }
            eprintln!("ATT {:?} per layer", t.elapsed() / 1000);
        }
    }
}
