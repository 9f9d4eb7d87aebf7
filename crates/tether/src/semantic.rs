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
    catalog.rank_semantically(SemanticRanker::new(
        Arc::new(LazyMiniLm(dir.clone())),
        Some(dir),
    ));
    None
}

/// The process's encoder, loaded at most once, on the first search. (Loading it while the
/// servers start was measured for `tools --search`: 0.1 s sooner warm, none cold on two cores,
/// and 18 MB more at the peak, the load's buffers beside the listing's.)
static LOADED: std::sync::OnceLock<Option<tether_encoder::SentenceEncoder>> =
    std::sync::OnceLock::new();

fn load(dir: &std::path::Path) -> Option<&'static tether_encoder::SentenceEncoder> {
    LOADED
        .get_or_init(|| match tether_encoder::SentenceEncoder::load(dir) {
            Ok(encoder) => Some(encoder),
            Err(e) => {
                safe_eprintln!("warning: {e}; tool search stays lexical");
                None
            }
        })
        .as_ref()
}

/// all-MiniLM-L6-v2 in `dir`, read from disk on first use (35 MB in memory, a few hundred ms).
struct LazyMiniLm(std::path::PathBuf);

impl tether_catalog::TextEncoder for LazyMiniLm {
    fn encode(&self, text: &str) -> Vec<f32> {
        // Without the model every vector is empty, and the fusion leaves BM25's order alone.
        load(&self.0).map(|e| e.embed(text)).unwrap_or_default()
    }

    fn encode_batch(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        match load(&self.0) {
            Some(encoder) => encoder.embed_batch(texts),
            None => vec![Vec::new(); texts.len()],
        }
    }

    fn model(&self) -> &str {
        tether_encoder::MODEL
    }

    fn sketch(&self, text: &str) -> Option<Vec<f32>> {
        load(&self.0).map(|e| e.sketch(text))
    }
}
