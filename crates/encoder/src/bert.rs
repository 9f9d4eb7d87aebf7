//! The six BERT layers of all-MiniLM-L6-v2 over a batch of token sequences. Every linear
//! layer runs over all the batch's tokens at once (one quantised matrix product per layer, no
//! padding: a token's row does not care which sequence it is in); only attention looks at one
//! sequence at a time.

use crate::int8::{Layout, QuantizedLinear, QuantizedRows};
use crate::math;
use crate::split::{self, OutputSplit};
use crate::weights::TensorFile;

/// Width of the hidden states.
pub(crate) const WIDTH: usize = 384;
/// Twelve heads of 32.
const HEAD_WIDTH: usize = 32;
const LAYERS: usize = 6;
const INTERMEDIATE: usize = 1536;
/// Rows of the word embedding table read at a time while loading (under the allocator's
/// 128 KB threshold, like `int8`'s).
const LOAD_ROWS: usize = 64;

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

/// The model: word embeddings and the layers' weights in i8 (a scale per row), position and
/// token type embeddings in f32: 23 MB in all.
pub(crate) struct Bert {
    /// The word embeddings in i8, a scale per word.
    words: Vec<i8>,
    word_scales: Vec<f32>,
    vocabulary: usize,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    /// The mean word embedding over the vocabulary, taken from every sketch: the direction
    /// all words share says nothing about what a text means.
    common: Vec<f32>,
    /// Whether the VNNI kernel may run (where the CPU has it).
    pub(crate) vnni: bool,
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

/// A layer norm's gain and bias.
fn norm(file: &mut TensorFile, prefix: &str) -> Result<Norm, String> {
    Ok(Norm {
        gain: file.vector(&format!("{prefix}.weight"), WIDTH)?,
        bias: file.vector(&format!("{prefix}.bias"), WIDTH)?,
    })
}

/// One linear layer from one or more tensors of `outputs` rows each, stacked (query, key and
/// value become one product), read a few rows at a time.
fn linear(
    file: &mut TensorFile,
    prefixes: &[String],
    inputs: usize,
    outputs: usize,
) -> Result<QuantizedLinear, String> {
    let mut bias = Vec::with_capacity(outputs * prefixes.len());
    let names: Vec<String> = prefixes.iter().map(|p| format!("{p}.weight")).collect();
    for (prefix, name) in prefixes.iter().zip(&names) {
        let (rows, columns) = file.matrix_shape(name)?;
        if (rows, columns) != (outputs, inputs) {
            return Err(format!(
                "{name} is {rows}×{columns}, not {outputs}×{inputs}"
            ));
        }
        bias.extend(file.vector(&format!("{prefix}.bias"), outputs)?);
    }
    QuantizedLinear::new(
        outputs * prefixes.len(),
        inputs,
        bias,
        Layout::for_this_cpu(),
        |first, count| {
            let (which, row) = (first / outputs, first % outputs);
            let name = names.get(which).ok_or("a row past the layer")?;
            file.rows(name, row..(row + count).min(outputs))
        },
    )
}

/// Encoder layer `layer`.
fn load_layer(file: &mut TensorFile, layer: usize) -> Result<Layer, String> {
    let p = format!("encoder.layer.{layer}");
    let attention = format!("{p}.attention.self");
    Ok(Layer {
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
        attention_out: linear(file, &[format!("{p}.attention.output.dense")], WIDTH, WIDTH)?,
        attention_norm: norm(file, &format!("{p}.attention.output.LayerNorm"))?,
        up: linear(
            file,
            &[format!("{p}.intermediate.dense")],
            WIDTH,
            INTERMEDIATE,
        )?,
        down: linear(file, &[format!("{p}.output.dense")], INTERMEDIATE, WIDTH)?,
        out_norm: norm(file, &format!("{p}.output.LayerNorm"))?,
    })
}

/// The word embeddings in i8 with a scale per word, and how many words there are.
fn load_words(file: &mut TensorFile) -> Result<(Vec<i8>, Vec<f32>, usize), String> {
    let name = "embeddings.word_embeddings.weight";
    let (vocabulary, columns) = file.matrix_shape(name)?;
    if columns != WIDTH {
        return Err(format!("{name} is {vocabulary}×{columns}, not ×{WIDTH}"));
    }
    let mut words = Vec::with_capacity(vocabulary * WIDTH);
    let mut word_scales = Vec::with_capacity(vocabulary);
    for start in (0..vocabulary).step_by(LOAD_ROWS) {
        let rows = file.rows(name, start..(start + LOAD_ROWS).min(vocabulary))?;
        let mut quantized = [0i8; WIDTH];
        for row in rows.chunks_exact(WIDTH) {
            let (scale, _) = crate::int8::quantize_weights(row, &mut quantized);
            words.extend_from_slice(&quantized);
            word_scales.push(scale);
        }
    }
    Ok((words, word_scales, vocabulary))
}

/// The first whole word of BERT's uncased vocabulary ("the"); below it are special tokens,
/// unused slots and single characters.
const FIRST_WORD: usize = 1996;

/// How much a word counts in a sketch: little for the commonest words, rising with the log of
/// its rank, so a rare word outweighs several common ones.
fn sketch_weight(id: usize) -> f32 {
    let rank = id.saturating_sub(FIRST_WORD) as f32;
    (1.0 + rank / 64.0).ln().max(0.1)
}

impl Bert {
    /// Reads and quantises the model, a few rows at a time, on two threads (the word
    /// embeddings on one, the layers on the other: about the same work), each with its own
    /// file from `open`.
    pub(crate) fn load(
        open: impl Fn() -> Result<TensorFile, String> + Sync,
    ) -> Result<Bert, String> {
        let (layers, (words, word_scales, vocabulary)) = std::thread::scope(|scope| {
            let words = scope.spawn(|| load_words(&mut open()?));
            let layers = open().and_then(|mut file| {
                (0..LAYERS)
                    .map(|layer| load_layer(&mut file, layer))
                    .collect::<Result<Vec<Layer>, String>>()
            });
            let words = words
                .join()
                .unwrap_or_else(|_| Err("reading the word embeddings failed".into()));
            Ok::<_, String>((layers?, words?))
        })?;
        let mut file = open()?;
        let (positions, _, position_columns) =
            file.matrix("embeddings.position_embeddings.weight")?;
        let (token_types, _, type_columns) =
            file.matrix("embeddings.token_type_embeddings.weight")?;
        if position_columns != WIDTH || type_columns != WIDTH || token_types.len() < WIDTH {
            return Err("the position or token type embeddings are not 384 wide".into());
        }
        let mut common = vec![0f32; WIDTH];
        for (row, scale) in words.chunks_exact(WIDTH).zip(&word_scales) {
            common
                .iter_mut()
                .zip(row)
                .for_each(|(c, &w)| *c += f32::from(w) * scale);
        }
        common
            .iter_mut()
            .for_each(|c| *c /= vocabulary.max(1) as f32);
        Ok(Bert {
            words,
            word_scales,
            vocabulary,
            common,
            positions,
            token_type: token_types[..WIDTH].to_vec(),
            embedding_norm: norm(&mut file, "embeddings.LayerNorm")?,
            layers,
            vnni: true,
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

    /// A text's sketch: the weighted mean of its word embeddings less the vocabulary's mean,
    /// unit length, with no layer run (microseconds, against milliseconds for [`Bert::embed`]).
    /// `ids` are WordPiece ids without `[CLS]` and `[SEP]`; a word's weight grows with its
    /// place in the vocabulary, which BERT's lists roughly by frequency, so "the" and "of"
    /// count for little beside "subtract".
    pub(crate) fn sketch(&self, ids: &[u32]) -> Vec<f32> {
        let mut sum = vec![0f32; WIDTH];
        for &id in ids {
            let id = id as usize;
            let (Some(row), Some(scale)) = (
                self.words.get(id * WIDTH..(id + 1) * WIDTH),
                self.word_scales.get(id),
            ) else {
                continue;
            };
            let weight = sketch_weight(id);
            for ((s, &w), c) in sum.iter_mut().zip(row).zip(&self.common) {
                *s += weight * (f32::from(w) * scale - c);
            }
        }
        let length = math::dot(&sum, &sum).sqrt();
        if length > 0.0 {
            sum.iter_mut().for_each(|v| *v /= length);
        }
        sum
    }

    /// The mean-pooled, unit-length embedding of each sequence (token ids below
    /// [`Bert::vocabulary`], at most [`Bert::max_positions`] each).
    pub(crate) fn embed(&self, sequences: &[Vec<u32>]) -> Vec<Vec<f32>> {
        self.embed_on(sequences, None)
    }

    /// [`Bert::embed`] of one sequence, its linear layers on two threads when `two_threads`
    /// (`split`): a query, which someone waits for.
    pub(crate) fn embed_one(&self, sequence: Vec<u32>, two_threads: bool) -> Vec<f32> {
        let sequences = [sequence];
        let vectors = if two_threads {
            split::with_second_thread(|split| self.embed_on(&sequences, Some(split)))
        } else {
            self.embed_on(&sequences, None)
        };
        vectors.into_iter().next().unwrap_or_default()
    }

    fn embed_on<'a>(
        &'a self,
        sequences: &[Vec<u32>],
        split: Option<&OutputSplit<'a>>,
    ) -> Vec<Vec<f32>> {
        // Each thread keeps its buffers between batches: a batch's few megabytes allocated
        // afresh each time cost page faults and zeroing (5% of an encoding, measured).
        thread_local! {
            static WORK: std::cell::RefCell<Workspace> = std::cell::RefCell::default();
        }
        WORK.with(|work| match work.try_borrow_mut() {
            Ok(mut work) => self.embed_in(sequences, &mut work, split),
            // Only re-entry could find it borrowed; that caller gets buffers of its own.
            Err(_) => self.embed_in(sequences, &mut Workspace::default(), split),
        })
    }

    fn embed_in<'a>(
        &'a self,
        sequences: &[Vec<u32>],
        work: &mut Workspace,
        split: Option<&OutputSplit<'a>>,
    ) -> Vec<Vec<f32>> {
        let tokens: usize = sequences.iter().map(Vec::len).sum();
        work.x.clear();
        work.x.resize(tokens * WIDTH, 0.0);
        let mut rows = work.x.chunks_exact_mut(WIDTH);
        for sequence in sequences {
            for (position, &id) in sequence.iter().enumerate() {
                let Some(row) = rows.next() else { break };
                let word = &self.words[id as usize * WIDTH..(id as usize + 1) * WIDTH];
                let scale = self.word_scales[id as usize];
                let position = &self.positions[position * WIDTH..(position + 1) * WIDTH];
                for (((v, &w), p), t) in
                    row.iter_mut().zip(word).zip(position).zip(&self.token_type)
                {
                    *v = f32::from(w) * scale + p + t;
                }
            }
        }
        math::layer_norm(
            &mut work.x,
            &self.embedding_norm.gain,
            &self.embedding_norm.bias,
        );
        for layer in &self.layers {
            self.layer(layer, sequences, work, split);
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

    fn layer<'a>(
        &'a self,
        layer: &'a Layer,
        sequences: &[Vec<u32>],
        work: &mut Workspace,
        split: Option<&OutputSplit<'a>>,
    ) {
        // A linear layer, then GELU over its outputs when `gelu`.
        let apply = |linear: &'a QuantizedLinear,
                     x: &QuantizedRows,
                     y: &mut [f32],
                     add: bool,
                     gelu: bool| match split {
            Some(split) => split.apply(linear, x, y, add, self.vnni, gelu),
            None => {
                linear.apply(x, y, add, self.vnni);
                if gelu {
                    math::gelu(y);
                }
            }
        };
        let tokens = work.x.len() / WIDTH;
        work.quantized.quantize(&work.x, WIDTH);
        work.qkv.resize(tokens * layer.qkv.outputs(), 0.0);
        apply(&layer.qkv, &work.quantized, &mut work.qkv, false, false);
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
        apply(
            &layer.attention_out,
            &work.quantized,
            &mut work.x,
            true,
            false,
        );
        math::layer_norm(
            &mut work.x,
            &layer.attention_norm.gain,
            &layer.attention_norm.bias,
        );
        work.quantized.quantize(&work.x, WIDTH);
        work.hidden.resize(tokens * INTERMEDIATE, 0.0);
        apply(&layer.up, &work.quantized, &mut work.hidden, false, true);
        work.quantized.quantize(&work.hidden, INTERMEDIATE);
        apply(&layer.down, &work.quantized, &mut work.x, true, false);
        math::layer_norm(&mut work.x, &layer.out_norm.gain, &layer.out_norm.bias);
    }
}
