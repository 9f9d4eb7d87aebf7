//! The six BERT layers of all-MiniLM-L6-v2 over a batch of token sequences. Every linear
//! layer runs over all the batch's tokens at once (one quantised matrix product per layer, no
//! padding: a token's row does not care which sequence it is in); only attention looks at one
//! sequence at a time.

use crate::int8::{QuantizedLinear, QuantizedRows};
use crate::math;
use crate::weights::TensorFile;

/// Width of the hidden states.
pub(crate) const WIDTH: usize = 384;
/// Twelve heads of 32.
const HEAD_WIDTH: usize = 32;
const LAYERS: usize = 6;
const INTERMEDIATE: usize = 1536;
/// Rows of the word embedding table read at a time while loading.
const LOAD_ROWS: usize = 2048;

struct Norm {
    gain: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    /// Query, key and value in one product (1,152 outputs).
    qkv: QuantizedLinear,
    attention_out: QuantizedLinear,
    attention_norm: Norm,
    up: QuantizedLinear,
    down: QuantizedLinear,
    out_norm: Norm,
}

/// The model: word embeddings in bfloat16 (looked up a row at a time, so precision is cheap
/// there), the rest of the embeddings in f32, the layers' weights in i8.
pub(crate) struct Bert {
    words: Vec<u16>,
    vocabulary: usize,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
}

/// Buffers one batch reuses from layer to layer.
#[derive(Default)]
struct Workspace {
    x: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    hidden: Vec<f32>,
    quantized: QuantizedRows,
    scores: Vec<f32>,
}

impl Bert {
    /// Reads and quantises the model, one tensor at a time.
    pub(crate) fn load(file: &mut TensorFile) -> Result<Bert, String> {
        let norm = |file: &mut TensorFile, prefix: &str| -> Result<Norm, String> {
            Ok(Norm {
                gain: file.vector(&format!("{prefix}.weight"), WIDTH)?,
                bias: file.vector(&format!("{prefix}.bias"), WIDTH)?,
            })
        };
        let linear = |file: &mut TensorFile,
                      prefixes: &[String],
                      inputs: usize,
                      outputs: usize|
         -> Result<QuantizedLinear, String> {
            let mut weight = Vec::with_capacity(inputs * outputs * prefixes.len());
            let mut bias = Vec::with_capacity(outputs * prefixes.len());
            for prefix in prefixes {
                let name = format!("{prefix}.weight");
                let (w, rows, columns) = file.matrix(&name)?;
                if (rows, columns) != (outputs, inputs) {
                    return Err(format!(
                        "{name} is {rows}×{columns}, not {outputs}×{inputs}"
                    ));
                }
                weight.extend(w);
                bias.extend(file.vector(&format!("{prefix}.bias"), outputs)?);
            }
            QuantizedLinear::new(&weight, outputs * prefixes.len(), inputs, bias)
        };
        let mut layers = Vec::with_capacity(LAYERS);
        for layer in 0..LAYERS {
            let p = format!("encoder.layer.{layer}");
            let attention = format!("{p}.attention.self");
            layers.push(Layer {
                qkv: linear(
                    file,
                    &[
                        format!("{attention}.query"),
                        format!("{attention}.key"),
                        format!("{attention}.value"),
                    ],
                    WIDTH,
                    WIDTH,
                )?,
                attention_out: linear(
                    file,
                    &[format!("{p}.attention.output.dense")],
                    WIDTH,
                    WIDTH,
                )?,
                attention_norm: norm(file, &format!("{p}.attention.output.LayerNorm"))?,
                up: linear(
                    file,
                    &[format!("{p}.intermediate.dense")],
                    WIDTH,
                    INTERMEDIATE,
                )?,
                down: linear(file, &[format!("{p}.output.dense")], INTERMEDIATE, WIDTH)?,
                out_norm: norm(file, &format!("{p}.output.LayerNorm"))?,
            });
        }
        let name = "embeddings.word_embeddings.weight";
        let (vocabulary, columns) = file.matrix_shape(name)?;
        if columns != WIDTH {
            return Err(format!("{name} is {vocabulary}×{columns}, not ×{WIDTH}"));
        }
        let mut words = Vec::with_capacity(vocabulary * WIDTH);
        for start in (0..vocabulary).step_by(LOAD_ROWS) {
            let rows = file.rows(name, start..(start + LOAD_ROWS).min(vocabulary))?;
            words.extend(rows.into_iter().map(to_bf16));
        }
        let (positions, _, position_columns) =
            file.matrix("embeddings.position_embeddings.weight")?;
        let (token_types, _, type_columns) =
            file.matrix("embeddings.token_type_embeddings.weight")?;
        if position_columns != WIDTH || type_columns != WIDTH || token_types.len() < WIDTH {
            return Err("the position or token type embeddings are not 384 wide".into());
        }
        Ok(Bert {
            words,
            vocabulary,
            positions,
            token_type: token_types[..WIDTH].to_vec(),
            embedding_norm: norm(file, "embeddings.LayerNorm")?,
            layers,
        })
    }

    /// How many tokens the embedding table has.
    pub(crate) fn vocabulary(&self) -> usize {
        self.vocabulary
    }

    /// How many positions a sequence may have.
    pub(crate) fn max_positions(&self) -> usize {
        self.positions.len() / WIDTH
    }

    /// The mean-pooled, unit-length embedding of each sequence (token ids below
    /// [`Bert::vocabulary`], at most [`Bert::max_positions`] each).
    pub(crate) fn embed(&self, sequences: &[Vec<u32>]) -> Vec<Vec<f32>> {
        let tokens: usize = sequences.iter().map(Vec::len).sum();
        let mut work = Workspace::default();
        work.x.resize(tokens * WIDTH, 0.0);
        let mut rows = work.x.chunks_exact_mut(WIDTH);
        for sequence in sequences {
            for (position, &id) in sequence.iter().enumerate() {
                let Some(row) = rows.next() else { break };
                let word = &self.words[id as usize * WIDTH..(id as usize + 1) * WIDTH];
                let position = &self.positions[position * WIDTH..(position + 1) * WIDTH];
                for (((v, &w), p), t) in
                    row.iter_mut().zip(word).zip(position).zip(&self.token_type)
                {
                    *v = from_bf16(w) + p + t;
                }
            }
        }
        math::layer_norm(
            &mut work.x,
            &self.embedding_norm.gain,
            &self.embedding_norm.bias,
        );
        for layer in &self.layers {
            self.layer(layer, sequences, &mut work);
        }
        let mut at = 0;
        sequences
            .iter()
            .map(|sequence| {
                let n = sequence.len();
                let mut pooled = vec![0f32; WIDTH];
                for row in work.x[at * WIDTH..(at + n) * WIDTH].chunks_exact(WIDTH) {
                    pooled.iter_mut().zip(row).for_each(|(p, v)| *p += v);
                }
                at += n;
                let length = math::dot(&pooled, &pooled).sqrt().max(1e-9);
                pooled.iter_mut().for_each(|v| *v /= length);
                pooled
            })
            .collect()
    }

    fn layer(&self, layer: &Layer, sequences: &[Vec<u32>], work: &mut Workspace) {
        let tokens = work.x.len() / WIDTH;
        work.quantized.quantize(&work.x, WIDTH);
        work.qkv.resize(tokens * layer.qkv.outputs(), 0.0);
        layer.qkv.apply(&work.quantized, &mut work.qkv, false);
        work.context.clear();
        work.context.resize(tokens * WIDTH, 0.0);
        let stride = 3 * WIDTH;
        let mut first = 0;
        for sequence in sequences {
            let n = sequence.len();
            math::attention(
                &work.qkv[first * stride..(first + n) * stride],
                n,
                WIDTH,
                HEAD_WIDTH,
                &mut work.context[first * WIDTH..(first + n) * WIDTH],
                &mut work.scores,
            );
            first += n;
        }
        work.quantized.quantize(&work.context, WIDTH);
        layer
            .attention_out
            .apply(&work.quantized, &mut work.x, true);
        math::layer_norm(
            &mut work.x,
            &layer.attention_norm.gain,
            &layer.attention_norm.bias,
        );
        work.quantized.quantize(&work.x, WIDTH);
        work.hidden.resize(tokens * INTERMEDIATE, 0.0);
        layer.up.apply(&work.quantized, &mut work.hidden, false);
        math::gelu(&mut work.hidden);
        work.quantized.quantize(&work.hidden, INTERMEDIATE);
        layer.down.apply(&work.quantized, &mut work.x, true);
        math::layer_norm(&mut work.x, &layer.out_norm.gain, &layer.out_norm.bias);
    }
}

/// f32 to bfloat16, rounding to nearest even.
fn to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    (bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

fn from_bf16(v: u16) -> f32 {
    f32::from_bits(u32::from(v) << 16)
}
