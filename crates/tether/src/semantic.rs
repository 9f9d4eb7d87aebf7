//! Semantic tool search for the front ends: `run` and `chat` with a model that searches, and
//! `tools --search`, give their catalogue the sentence encoder (all-MiniLM-L6-v2, fetched once
//! into the model cache beside the default model), so searches rank by meaning as well as by
//! words. `"semanticSearch": false` in the config keeps search lexical. The encoder loads on
//! the first search, so a run that never searches pays only for the file check.

use tether_catalog::ToolCatalog;

/// Gives `catalog` semantic ranking when `on`, fetching the encoder the first time. Returns a
/// warning to show when that failed (search then stays lexical).
pub(crate) async fn attach(catalog: &ToolCatalog, on: bool) -> Option<String> {
    if on {
        attach_encoder(catalog).await
    } else {
        None
    }
}

async fn attach_encoder(catalog: &ToolCatalog) -> Option<String> {
    use std::sync::Arc;
    use tether_catalog::SemanticRanker;
    use tether_models as provision;
    let progress = crate::models::progress_printer("the search encoder");
    let dir = match provision::ensure_encoder_model(&progress).await {
        Ok(dir) => dir,
        Err(e) => return Some(format!("{e}; tool search stays lexical")),
    };
    let encoder = Arc::new(LazyMiniLm {
        dir: dir.clone(),
        loaded: std::sync::OnceLock::new(),
    });
    catalog.rank_semantically(SemanticRanker::new(encoder, Some(dir)));
    None
}

/// all-MiniLM-L6-v2, read from disk on first use (35 MB in memory, a few hundred ms).
struct LazyMiniLm {
    dir: std::path::PathBuf,
    loaded: std::sync::OnceLock<Option<tether_encoder::SentenceEncoder>>,
}

impl LazyMiniLm {
    fn encoder(&self) -> Option<&tether_encoder::SentenceEncoder> {
        self.loaded
            .get_or_init(|| match tether_encoder::SentenceEncoder::load(&self.dir) {
                Ok(encoder) => Some(encoder),
                Err(e) => {
                    safe_eprintln!("warning: {e}; tool search stays lexical");
                    None
                }
            })
            .as_ref()
    }
}

impl tether_catalog::TextEncoder for LazyMiniLm {
    fn encode(&self, text: &str) -> Vec<f32> {
        // Without the model every vector is empty, and the fusion leaves BM25's order alone.
        self.encoder().map(|e| e.embed(text)).unwrap_or_default()
    }

    fn encode_batch(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        match self.encoder() {
            Some(encoder) => encoder.embed_batch(texts),
            None => vec![Vec::new(); texts.len()],
        }
    }

    fn model(&self) -> &str {
        tether_encoder::MODEL
    }
}
