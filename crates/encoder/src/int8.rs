//! Linear layers in 8-bit integers: weights quantised once per output row (symmetric, i8),
//! activations per input row as they arrive (affine, u8 with a zero point), products summed in
//! i32 and scaled back to f32 with the bias. That is what makes encoding a catalogue of
//! thousands of tools take seconds rather than tens of seconds: AVX-512 VNNI multiplies 64
//! byte pairs per instruction where f32 FMA does 16 (docs/decisions.md has the measurements).
//!
//! The integer sums are exact, so every kernel gives the same sums; the one used is picked at
//! run time: AVX-512 VNNI, AVX-VNNI, AVX2, or plain code the compiler vectorises for any CPU
//! (which reads the weights laid out another way: [`Layout`]).

/// Output columns per panel: four blocks of sixteen, the width of one VNNI accumulator each.
pub(crate) const PANEL: usize = 64;

/// The alignment of the packed weights: a cache line.
const ALIGN: usize = 64;
/// Bytes of weights per panel per group of four inputs.
const PANEL_STEP: usize = PANEL * 4;
/// Activation rows one kernel call works on (6 × 4 accumulators fit AVX-512's 32 registers).
const ROWS: usize = 6;
/// Weight rows read from the file at a time while loading: 16 rows of 1,536 floats stay under
/// the allocator's 128 KB threshold, so one small buffer is reused rather than large ones
/// mapped and left behind.
const LOAD_ROWS: usize = 16;

/// How a panel's 256 bytes per group of four inputs are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Each output's four weights together, as VNNI's byte dot products (and the AVX2 kernel)
    /// read them.
    Quads,
    /// Each input's 64 weights together, so plain code multiplies one input into 64 outputs
    /// with contiguous loads: what the compiler vectorises on any CPU.
    Columns,
}

impl Layout {
    /// The layout this CPU's fastest kernel reads.
    pub(crate) fn for_this_cpu() -> Layout {
        #[cfg(target_arch = "x86_64")]
        if has_vnni() || has_avx_vnni() || std::arch::is_x86_feature_detected!("avx2") {
            return Layout::Quads;
        }
        Layout::Columns
    }
}

/// A linear layer `y = x Wᵀ + b` with W quantised to i8 per output row.
pub(crate) struct QuantizedLinear {
    inputs: usize,
    outputs: usize,
    /// W in panels: for each 64 outputs, for each group of four inputs, 256 bytes in `layout`,
    /// so a kernel reads each panel front to back. They start at `start`, the first byte on a
    /// 64-byte boundary: a large allocation starts 16 bytes past one, and then every other
    /// 32-byte load of a kernel straddles two cache lines.
    packed: Vec<i8>,
    start: usize,
    layout: Layout,
    /// W's scale per output row.
    scales: Vec<f32>,
    /// The sum of each output row's quantised weights, to take the activations' zero points
    /// out of the integer sums.
    sums: Vec<i32>,
    bias: Vec<f32>,
}

/// Where a call's outputs go: the panels (64 outputs each) it computes, how far apart the
/// rows of its output buffer are, and where in a row the first panel's outputs go.
pub(crate) struct Outputs {
    /// The panels computed, within [`QuantizedLinear::panels`].
    pub(crate) panels: std::ops::Range<usize>,
    /// Floats from one row's outputs to the next's.
    pub(crate) stride: usize,
    /// The place in a row of the first panel's first output.
    pub(crate) offset: usize,
}

/// Activation rows quantised to u8: `x ≈ (q - zero) × scale`, per row.
#[derive(Default, Clone)]
pub(crate) struct QuantizedRows {
    width: usize,
    data: Vec<u8>,
    scales: Vec<f32>,
    zeros: Vec<i32>,
}

impl QuantizedLinear {
    /// Quantises a layer of `outputs` × `inputs` weights (a row per output, as PyTorch stores
    /// a Linear) into `layout`, taking the rows from `read_rows(first, count)` a few at a time
    /// so that no float copy of the whole matrix is ever held. `outputs` must be a multiple of
    /// 64 and `inputs` of 4 (MiniLM's 384, 1152 and 1536 are).
    pub(crate) fn new(
        outputs: usize,
        inputs: usize,
        bias: Vec<f32>,
        layout: Layout,
        mut read_rows: impl FnMut(usize, usize) -> Result<Vec<f32>, String>,
    ) -> Result<QuantizedLinear, String> {
        if !outputs.is_multiple_of(PANEL) || !inputs.is_multiple_of(4) {
            return Err(format!(
                "a {outputs}×{inputs} layer does not fit the kernels"
            ));
        }
        if bias.len() != outputs {
            return Err(format!("{} biases for {outputs} outputs", bias.len()));
        }
        let groups = inputs / 4;
        let mut packed = vec![0i8; outputs * inputs + ALIGN - 1];
        // align_offset may answer usize::MAX where it cannot tell; unaligned is then correct,
        // only slower.
        let start = match packed.as_ptr().align_offset(ALIGN) {
            offset if offset < ALIGN => offset,
            _ => 0,
        };
        let mut scales = Vec::with_capacity(outputs);
        let mut sums = Vec::with_capacity(outputs);
        let mut quantized = vec![0i8; inputs];
        let mut first = 0;
        while first < outputs {
            let count = LOAD_ROWS.min(outputs - first);
            let rows = read_rows(first, count)?;
            if rows.len() != count * inputs {
                return Err(format!(
                    "rows {first}.. hold {} weights, not {}",
                    rows.len(),
                    count * inputs
                ));
            }
            for (i, row) in rows.chunks_exact(inputs).enumerate() {
                let (scale, sum) = quantize_weights(row, &mut quantized);
                scales.push(scale);
                sums.push(sum);
                let (panel, column) = ((first + i) / PANEL, (first + i) % PANEL);
                for group in 0..groups {
                    let base = (panel * groups + group) * PANEL_STEP;
                    for t in 0..4 {
                        let at = match layout {
                            Layout::Quads => column * 4 + t,
                            Layout::Columns => t * PANEL + column,
                        };
                        packed[start + base + at] = quantized[group * 4 + t];
                    }
                }
            }
            first += count;
        }
        Ok(QuantizedLinear {
            inputs,
            outputs,
            packed,
            start,
            layout,
            scales,
            sums,
            bias,
        })
    }

    /// How many outputs a row gets.
    pub(crate) fn outputs(&self) -> usize {
        self.outputs
    }

    /// The packed weights, from their aligned start.
    fn weights(&self) -> &[i8] {
        &self.packed[self.start..]
    }

    /// How many panels of 64 outputs the layer has.
    pub(crate) fn panels(&self) -> usize {
        self.outputs / PANEL
    }

    /// `y = x Wᵀ + b` for every row of `x`, written into `y` (rows × outputs), or added to
    /// what `y` holds when `accumulate` (a residual connection). The VNNI kernel runs where the
    /// CPU has it and `vnni` allows it.
    pub(crate) fn apply(&self, x: &QuantizedRows, y: &mut [f32], accumulate: bool, vnni: bool) {
        let out = Outputs {
            panels: 0..self.panels(),
            stride: self.outputs,
            offset: 0,
        };
        self.apply_panels(x, y, &out, accumulate, vnni);
    }

    /// [`QuantizedLinear::apply`] for the outputs of `out.panels` alone: output column `c`
    /// of row `r` is `y[r × out.stride + out.offset + c − out.panels.start × 64]`, so two
    /// threads can each take some of the panels, and each reads only their weights.
    pub(crate) fn apply_panels(
        &self,
        x: &QuantizedRows,
        y: &mut [f32],
        out: &Outputs,
        accumulate: bool,
        vnni: bool,
    ) {
        debug_assert_eq!(x.width, self.inputs);
        debug_assert!(out.panels.end <= self.panels());
        debug_assert!(
            y.len() >= x.scales.len().saturating_sub(1) * out.stride + out.panels.len() * PANEL
        );
        if self.layout == Layout::Columns {
            self.apply_with(
                x,
                y,
                out,
                accumulate,
                |x, width, count, weights, _, sums| portable_panel(x, width, count, weights, sums),
            );
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if vnni && has_vnni() {
            // SAFETY: has_vnni() saw the CPU features the function is compiled for.
            unsafe { self.apply_vnni(x, y, out, accumulate) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if vnni && has_avx_vnni() {
            // SAFETY: as above.
            unsafe { self.apply_avx_vnni(x, y, out, accumulate) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: as above.
            unsafe { self.apply_avx2(x, y, out, accumulate) };
            return;
        }
        // Quads on a CPU without AVX2 (only when asked for): the sums, slowly.
        self.apply_with(
            x,
            y,
            out,
            accumulate,
            |x, width, count, weights, _, sums| quads_panel(x, width, count, weights, sums),
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn apply_vnni(&self, x: &QuantizedRows, y: &mut [f32], out: &Outputs, accumulate: bool) {
        self.apply_with(
            x,
            y,
            out,
            accumulate,
            |x, width, count, weights, _, sums| {
                // SAFETY: apply() saw the features; apply_with passes `count` rows of `width`
                // bytes and a whole panel.
                unsafe { vnni::panel(x, width, count, weights, sums) }
            },
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avxvnni")]
    unsafe fn apply_avx_vnni(
        &self,
        x: &QuantizedRows,
        y: &mut [f32],
        out: &Outputs,
        accumulate: bool,
    ) {
        self.apply_with(
            x,
            y,
            out,
            accumulate,
            |x, width, count, weights, _, sums| {
                // SAFETY: apply() saw the features; apply_with passes `count` rows of `width`
                // bytes and a whole panel.
                unsafe { avx_vnni::panel(x, width, count, weights, sums) }
            },
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_avx2(&self, x: &QuantizedRows, y: &mut [f32], out: &Outputs, accumulate: bool) {
        self.apply_with(
            x,
            y,
            out,
            accumulate,
            |x, width, count, weights, w_sums, sums| {
                // SAFETY: apply() saw the features; apply_with passes `count` rows of `width`
                // bytes, a whole panel and its column sums.
                unsafe { avx2::panel(x, width, count, weights, w_sums, sums) }
            },
        );
    }

    /// The panels of `out` in turn, each over every row six at a time, then each sum scaled
    /// back to f32 with the bias: inlined into each CPU's variant so the scaling vectorises
    /// for it too.
    #[inline(always)]
    fn apply_with(
        &self,
        x: &QuantizedRows,
        y: &mut [f32],
        out: &Outputs,
        accumulate: bool,
        kernel: impl Fn(&[u8], usize, usize, &[i8], &[i32; PANEL], &mut [[i32; PANEL]; ROWS]),
    ) {
        let rows = x.scales.len();
        let groups = self.inputs / 4;
        let mut sums = [[0i32; PANEL]; ROWS];
        let first_column = out.panels.start * PANEL;
        for panel in out.panels.clone() {
            let weights =
                &self.weights()[panel * groups * PANEL_STEP..(panel + 1) * groups * PANEL_STEP];
            let columns = panel * PANEL..(panel + 1) * PANEL;
            let (Ok(w_sums), Ok(w_scales), Ok(bias)) = (
                <&[i32; PANEL]>::try_from(&self.sums[columns.clone()]),
                <&[f32; PANEL]>::try_from(&self.scales[columns.clone()]),
                <&[f32; PANEL]>::try_from(&self.bias[columns.clone()]),
            ) else {
                continue;
            };
            let mut first = 0;
            while first < rows {
                let count = (rows - first).min(ROWS);
                let x_rows = &x.data[first * self.inputs..(first + count) * self.inputs];
                kernel(x_rows, self.inputs, count, weights, w_sums, &mut sums);
                for (r, row_sums) in sums.iter().enumerate().take(count) {
                    let row = first + r;
                    let (x_scale, zero) = (x.scales[row], x.zeros[row]);
                    let at = row * out.stride + out.offset + columns.start - first_column;
                    let Some(Ok(row_out)) =
                        y.get_mut(at..at + PANEL).map(<&mut [f32; PANEL]>::try_from)
                    else {
                        continue;
                    };
                    if accumulate {
                        for c in 0..PANEL {
                            row_out[c] += ((row_sums[c] - zero * w_sums[c]) as f32)
                                .mul_add(x_scale * w_scales[c], bias[c]);
                        }
                    } else {
                        for c in 0..PANEL {
                            row_out[c] = ((row_sums[c] - zero * w_sums[c]) as f32)
                                .mul_add(x_scale * w_scales[c], bias[c]);
                        }
                    }
                }
                first += count;
            }
        }
    }
}

impl QuantizedRows {
    /// How many rows the buffer holds.
    pub(crate) fn len(&self) -> usize {
        self.scales.len()
    }

    /// Quantises `x`, rows of `width` floats, into this buffer (reused between layers).
    pub(crate) fn quantize(&mut self, x: &[f32], width: usize) {
        self.width = width;
        self.data.resize(x.len(), 0);
        self.scales.clear();
        self.zeros.clear();
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature the function is compiled for was just detected.
            unsafe { self.quantize_avx512(x, width) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above.
            unsafe { self.quantize_avx2(x, width) };
            return;
        }
        self.quantize_body(x, width, crate::math::min_max);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn quantize_avx512(&mut self, x: &[f32], width: usize) {
        // SAFETY: this function runs only where AVX-512 F was detected.
        self.quantize_body(x, width, |row| unsafe { crate::math::min_max_avx512(row) });
    }

    /// The rows through [`avx2::quantize_row`]: what the compiler made of the plain loop
    /// (its u8 stores one value at a time) took a twentieth of a query's encoding.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn quantize_avx2(&mut self, x: &[f32], width: usize) {
        for (row, out) in x.chunks_exact(width).zip(self.data.chunks_exact_mut(width)) {
            // SAFETY: this function runs only where AVX2 was detected.
            let (scale, zero) = unsafe { avx2::quantize_row(row, out) };
            self.scales.push(scale);
            self.zeros.push(zero);
        }
    }

    #[inline(always)]
    fn quantize_body(&mut self, x: &[f32], width: usize, min_max: impl Fn(&[f32]) -> (f32, f32)) {
        for (row, out) in x.chunks_exact(width).zip(self.data.chunks_exact_mut(width)) {
            let (scale, zero) = quantize_row(row, out, min_max(row));
            self.scales.push(scale);
            self.zeros.push(zero);
        }
    }
}

/// Affine u8 quantisation of one row, whose smallest and largest values are given; the range
/// always holds 0, so zeros stay exact. Returns (scale, zero point).
#[inline(always)]
fn quantize_row(row: &[f32], out: &mut [u8], low_high: (f32, f32)) -> (f32, i32) {
    let (scale, zero) = affine(low_high);
    let inverse = 1.0 / scale;
    quantize_values(row, out, inverse, zero);
    (scale, zero as i32)
}

/// The scale and zero point of a row whose smallest and largest values are given, the range
/// widened to hold 0.
#[inline(always)]
fn affine((low, high): (f32, f32)) -> (f32, f32) {
    let (low, high) = (low.min(0.0), high.max(0.0));
    let scale = if high > low {
        (high - low) / 255.0
    } else {
        1.0
    };
    (scale, (-low / scale).round().clamp(0.0, 255.0))
}

/// Each value times `inverse` plus `zero`, rounded to the nearest integer (ties to even) and
/// held to 0..=255.
#[inline(always)]
fn quantize_values(row: &[f32], out: &mut [u8], inverse: f32, zero: f32) {
    for (q, &v) in out.iter_mut().zip(row) {
        // Adding 2^23 to a value in [0, 255] leaves it rounded to the nearest integer in the
        // low mantissa bits: a conversion the compiler vectorises, where `as` (saturating, NaN
        // to 0) goes one value at a time.
        *q = ((v * inverse + zero).clamp(0.0, 255.0) + 8_388_608.0).to_bits() as u8;
    }
}

/// A row of weights in i8, symmetric (`v ≈ q × scale`): its scale and the sum of its values.
/// Loading quantises MiniLM's 22 million weights each time; without SSE 4.1 every `round` is
/// a call into libm, so the row goes through a copy compiled for AVX2 where the CPU has it
/// (the same arithmetic, so the same values).
pub(crate) fn quantize_weights(row: &[f32], out: &mut [i8]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the feature the function is compiled for was just detected.
        return unsafe { quantize_weights_avx2(row, out) };
    }
    quantize_weights_body(row, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_weights_avx2(row: &[f32], out: &mut [i8]) -> (f32, i32) {
    quantize_weights_body(row, out)
}

#[inline(always)]
fn quantize_weights_body(row: &[f32], out: &mut [i8]) -> (f32, i32) {
    let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
    let mut sum = 0i32;
    for (q, v) in out.iter_mut().zip(row) {
        *q = (v / scale).round().clamp(-127.0, 127.0) as i8;
        sum += i32::from(*q);
    }
    (scale, sum)
}

/// Whether this CPU runs the VNNI kernel.
fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs the 256-bit VNNI kernel (AVX-VNNI: Intel's cores since 2021, AMD's
/// since Zen 5).
fn has_avx_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avxvnni")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The integer sums of `count` rows of `x` with one panel of weights in the `Columns` layout,
/// in plain code: each input times its 64 contiguous weights, which the compiler vectorises
/// for whatever CPU it builds for.
#[inline(always)]
fn portable_panel(
    x: &[u8],
    width: usize,
    count: usize,
    weights: &[i8],
    sums: &mut [[i32; PANEL]; ROWS],
) {
    for (r, row_sums) in sums.iter_mut().enumerate().take(count) {
        let row = &x[r * width..(r + 1) * width];
        *row_sums = [0; PANEL];
        for (inputs, step) in row.chunks_exact(4).zip(weights.chunks_exact(PANEL_STEP)) {
            for (t, &input) in inputs.iter().enumerate() {
                let Ok(column) = <&[i8; PANEL]>::try_from(&step[t * PANEL..(t + 1) * PANEL]) else {
                    continue;
                };
                let a = i32::from(input);
                for c in 0..PANEL {
                    row_sums[c] += a * i32::from(column[c]);
                }
            }
        }
    }
}

/// The same sums from the `Quads` layout in plain code (no vector unit assumed).
fn quads_panel(
    x: &[u8],
    width: usize,
    count: usize,
    weights: &[i8],
    sums: &mut [[i32; PANEL]; ROWS],
) {
    for (r, row_sums) in sums.iter_mut().enumerate().take(count) {
        let row = &x[r * width..(r + 1) * width];
        *row_sums = [0; PANEL];
        for (inputs, step) in row.chunks_exact(4).zip(weights.chunks_exact(PANEL_STEP)) {
            for (sum, w) in row_sums.iter_mut().zip(step.chunks_exact(4)) {
                *sum += w
                    .iter()
                    .zip(inputs)
                    .map(|(&w, &a)| i32::from(a) * i32::from(w))
                    .sum::<i32>();
            }
        }
    }
}

// The kernels, one file each (their module docs say how each sums).
#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx_vnni;

#[cfg(target_arch = "x86_64")]
mod vnni;

/// A layer of `outputs` × `inputs` made-up weights and biases (in the `Quads` layout), and
/// `rows` rows of made-up inputs quantised for it: the fixture of this module's tests and
/// `split`'s.
#[cfg(test)]
pub(crate) fn test_layer_and_rows(
    outputs: usize,
    inputs: usize,
    rows: usize,
) -> (QuantizedLinear, QuantizedRows) {
    let weight: Vec<f32> = (0..outputs * inputs)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let read =
        |first: usize, count: usize| Ok(weight[first * inputs..(first + count) * inputs].to_vec());
    let bias: Vec<f32> = (0..outputs).map(|i| i as f32 / 100.0).collect();
    let layer = QuantizedLinear::new(outputs, inputs, bias, Layout::Quads, read)
        .expect("made-up weights fit the kernels");
    let x: Vec<f32> = (0..rows * inputs)
        .map(|i| (i as f32 * 0.21).cos())
        .collect();
    let mut q = QuantizedRows::default();
    q.quantize(&x, inputs);
    (layer, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_quantise_the_same_on_every_path() {
        // Halfway cases (x.5 after scaling) round away from zero in both, as libm's roundf.
        let mut row: Vec<f32> = (0..1536).map(|i| (i as f32 * 0.37).sin() * 100.0).collect();
        // A largest value of 127 makes the scale 1, so these are exact halves.
        row[..6].copy_from_slice(&[127.0, 2.5, -2.5, 0.5, -0.5, 126.5]);
        let (mut plain, mut fast) = (vec![0i8; row.len()], vec![0i8; row.len()]);
        let expected = quantize_weights_body(&row, &mut plain);
        assert_eq!(quantize_weights(&row, &mut fast), expected);
        assert_eq!(plain, fast);
        let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (q, v) in plain.iter().zip(&row) {
            assert_eq!(*q, (v / (largest / 127.0)).round() as i8);
        }
        assert_eq!(plain[..6], [127, 3, -3, 1, -1, 127]);
    }

    /// The AVX2 activation path gives the plain loop's bytes, scale and zero point: rows of
    /// the encoder's widths and a ragged one, halfway cases rounded to even in both.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn activations_quantise_the_same_on_every_path() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        for width in [384, 1536, 45, 7] {
            let mut row: Vec<f32> = (0..width)
                .map(|i| (i as f32 * 0.61).cos() * 3.0 - 0.4)
                .collect();
            let plain_row = |row: &[f32]| {
                let mut out = vec![0u8; row.len()];
                let found = quantize_row(row, &mut out, crate::math::min_max(row));
                (out, found)
            };
            let fast_row = |row: &[f32]| {
                let mut out = vec![0u8; row.len()];
                // SAFETY: AVX2 was detected above.
                let found = unsafe { avx2::quantize_row(row, &mut out) };
                (out, found)
            };
            assert_eq!(fast_row(&row), plain_row(&row), "width {width}");
            // A range of 0..=255 makes the scale 1 and the zero 0: exact halves.
            row.iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = (i % 255) as f32 + 0.5);
            row[0] = 0.0;
            row[width - 1] = 255.0;
            let (bytes, found) = plain_row(&row);
            assert_eq!(found, (1.0, 0), "width {width}");
            assert_eq!(bytes[1..3], [2, 2], "ties to even");
            assert_eq!(fast_row(&row), (bytes, found), "width {width}");
        }
    }

    /// Half the panels into a narrower buffer are the same numbers as those columns of the
    /// whole layer, and the packed weights start on a cache line.
    #[test]
    fn some_panels_alone_are_those_columns_of_the_whole() {
        let (outputs, inputs, rows) = (192, 64, 5);
        let (layer, q) = test_layer_and_rows(outputs, inputs, rows);
        assert_eq!(layer.weights().as_ptr().align_offset(ALIGN), 0);
        let mut whole = vec![0f32; rows * outputs];
        layer.apply(&q, &mut whole, false, true);
        let tail = Outputs {
            panels: 1..3,
            stride: 2 * PANEL,
            offset: 0,
        };
        let mut part = vec![0f32; rows * tail.stride];
        layer.apply_panels(&q, &mut part, &tail, false, true);
        for (w, p) in whole
            .chunks_exact(outputs)
            .zip(part.chunks_exact(tail.stride))
        {
            assert_eq!(&w[PANEL..], p);
        }
    }

    /// The AVX2 kernel's i16 pair sums must not saturate at the extremes (inputs 0 and 255,
    /// weights ±127 of one sign), for any count of rows it is given.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_sums_are_exact_at_the_extremes_for_every_row_count() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let (outputs, inputs) = (64, 32);
        let weight: Vec<f32> = (0..outputs * inputs)
            .map(|i| match (i / inputs) % 4 {
                0 => 1.0,
                1 => -1.0,
                2 => {
                    if i % 2 == 0 {
                        1.0
                    } else {
                        -1.0
                    }
                }
                _ => ((i * 29 % 23) as f32 - 11.0) / 11.0,
            })
            .collect();
        let read = |first: usize, count: usize| {
            Ok(weight[first * inputs..(first + count) * inputs].to_vec())
        };
        let layer =
            QuantizedLinear::new(outputs, inputs, vec![0.0; outputs], Layout::Quads, read).unwrap();
        let data: Vec<u8> = (0..ROWS * inputs)
            .map(|i| match (i / inputs) % 3 {
                0 => 255,
                1 => 0,
                _ => (i * 97 % 256) as u8,
            })
            .collect();
        let w_sums = <&[i32; PANEL]>::try_from(&layer.sums[..PANEL]).unwrap();
        for count in 1..=ROWS {
            let (mut plain, mut fast) = ([[0i32; PANEL]; ROWS], [[0i32; PANEL]; ROWS]);
            quads_panel(&data, inputs, count, layer.weights(), &mut plain);
            // SAFETY: the feature was detected; `data` holds six rows and the panel is whole.
            unsafe { avx2::panel(&data, inputs, count, layer.weights(), w_sums, &mut fast) };
            assert_eq!(plain[..count], fast[..count], "{count} rows");
        }
    }

    /// Every kernel gives the same integer sums as a plain f32 product does, within the
    /// quantisation's error.
    #[test]
    fn quantised_product_is_close_to_the_float_one() {
        let (outputs, inputs, rows) = (128, 96, 7);
        let weight: Vec<f32> = (0..outputs * inputs)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 70.0)
            .collect();
        let bias: Vec<f32> = (0..outputs).map(|j| j as f32 / 100.0).collect();
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 53 % 89) as f32 - 30.0) / 40.0)
            .collect();
        let read = |first: usize, count: usize| {
            Ok(weight[first * inputs..(first + count) * inputs].to_vec())
        };
        let layer =
            QuantizedLinear::new(outputs, inputs, bias.clone(), Layout::Quads, read).unwrap();
        let columns =
            QuantizedLinear::new(outputs, inputs, bias.clone(), Layout::Columns, read).unwrap();
        let mut q = QuantizedRows::default();
        q.quantize(&x, inputs);
        let mut y = vec![0.0; rows * outputs];
        layer.apply(&q, &mut y, false, true);
        let mut portable = vec![[[0i32; PANEL]; ROWS]; 2];
        let groups = inputs / 4;
        let weights = &layer.weights()[..groups * PANEL_STEP];
        quads_panel(&q.data[..6 * inputs], inputs, 6, weights, &mut portable[0]);
        let mut other = [[0i32; PANEL]; ROWS];
        let column_weights = &columns.weights()[..groups * PANEL_STEP];
        portable_panel(&q.data[..6 * inputs], inputs, 6, column_weights, &mut other);
        assert_eq!(portable[0], other, "the two layouts' plain sums differ");
        let mut from_columns = vec![0.0; rows * outputs];
        columns.apply(&q, &mut from_columns, false, true);
        assert_eq!(y, from_columns, "the Columns layout gives other outputs");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let w_sums = <&[i32; PANEL]>::try_from(&layer.sums[..PANEL]).unwrap();
            let mut other = [[0i32; PANEL]; ROWS];
            // SAFETY: the feature was detected; the slices hold 6 rows and the panel.
            unsafe {
                avx2::panel(
                    &q.data[..6 * inputs],
                    inputs,
                    6,
                    weights,
                    w_sums,
                    &mut other,
                )
            };
            assert_eq!(portable[0], other, "AVX2 and portable sums differ");
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx_vnni() {
            let mut other = [[0i32; PANEL]; ROWS];
            // SAFETY: the features were detected; the slices hold 6 rows and the panel.
            unsafe { avx_vnni::panel(&q.data[..6 * inputs], inputs, 6, weights, &mut other) };
            assert_eq!(portable[0], other, "AVX-VNNI and portable sums differ");
        }
        #[cfg(target_arch = "x86_64")]
        if has_vnni() {
            // SAFETY: the features were detected; the slices hold 6 rows and the panel.
            unsafe { vnni::panel(&q.data[..6 * inputs], inputs, 6, weights, &mut portable[1]) };
            assert_eq!(portable[0], portable[1], "VNNI and portable sums differ");
        }
        for r in 0..rows {
            for j in 0..outputs {
                let exact: f32 = (0..inputs)
                    .map(|k| x[r * inputs + k] * weight[j * inputs + k])
                    .sum::<f32>()
                    + bias[j];
                let got = y[r * outputs + j];
                assert!(
                    (got - exact).abs() < 0.05 * (1.0 + exact.abs()),
                    "{r},{j}: {got} vs {exact}"
                );
            }
        }
        let mut again = y.clone();
        layer.apply(&q, &mut again, true, true);
        assert!((again[5] - 2.0 * y[5]).abs() < 1e-4, "accumulate adds");
    }
}
