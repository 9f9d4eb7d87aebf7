//! Semantic ranking beside BM25: a sentence encoder turns each tool's name, description and
//! parameter names into a vector, and a query into another; a search then adds the two
//! rankings, each as z-scores over every tool, at equal weight (docs/decisions.md). Words people use that no tool uses
//! ("take 9 away from 30" for `subtract`) are found this way; exact names still come first.
//!
//! The encoder itself lives above this crate (`tether-local` runs one); this module only
//! needs [`TextEncoder`]. Tool vectors are computed once per distinct tool text, on the first
//! search that needs them, and kept in memory and in a cache file, so a catalogue of
//! thousands of tools is encoded once per machine rather than once per run. A search waits
//! for the encoding at most [`ENCODE_BUDGET`]; past it the search is BM25's alone while the
//! encoding goes on in the background, saving what it has every few seconds, so a catalogue
//! too big to encode at once (ten thousand new tools) costs one search the budget, not minutes,
//! and later searches and runs pick up where it got to. A catalogue over
//! [`SHORTLIST_ABOVE`](crate::shortlist::SHORTLIST_ABOVE) tools, given an encoder that makes
//! sketches, is ranked in two stages instead (`shortlist`), and only the tools its searches
//! shortlist or sample are ever encoded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tether_protocol::QualifiedTool;

use crate::routing::{Routing, z_scores};
use crate::search::{Hit, Lexical, split_identifiers};
use crate::values;

/// Weight of the semantic z-score against BM25's. Measured on the development sets (BFCL's
/// four tuned categories, the 40 user-phrased questions, MetaTool's ToolE development part):
/// 1.5 raises recall@1 and MRR on all of them and recall@5 on all but BFCL's
/// parallel_multiple (0.660 → 0.625, where every one of several functions must be in the top
/// five) against 1.0; 2 and 3 add little on ToolE and lose more elsewhere (docs/decisions.md).
pub(crate) const SEMANTIC_WEIGHT: f64 = 1.5;

/// What BM25's z-score may reach, times the share of the query's most telling words a tool
/// matches ([`Lexical::ceiling`]). Among thousands of tools few match any one word, so the
/// z-score of a tool matching one incidental word ("hour" in "what hour is it in Sydney", for
/// museum opening hours) rises to 10–20 and buries what meaning and the servers say; among a
/// few dozen it stays small and this bound is never reached. Measured on the development sets
/// (docs/decisions.md): 8–24 all lift the user-phrased questions among BFCL's tools; 12 lifts
/// them and ToolE most, for two questions each of BFCL's simple_python and multiple.
const MATCHED_SHARE_WEIGHT: f64 = 12.0;

/// The longest a search waits for tool vectors before it ranks by words alone. The BFCL
/// catalogue (1,853 tools) encodes in about 13 s cold on two cores; ten thousand new tools took
/// over two minutes before the budget.
pub const ENCODE_BUDGET: Duration = Duration::from_secs(30);

/// Texts per call to the encoder: enough that a batched encoder reuses its weights across
/// hundreds of tokens, few enough that every core gets a share of a small catalogue.
const BATCH: usize = 16;

/// How often a background encoding saves what it has made.
const SAVE_EVERY: Duration = Duration::from_secs(5);

/// Turns text into a unit-length vector; texts that mean the same land close together.
pub trait TextEncoder: Send + Sync {
    /// The embedding of `text`.
    fn encode(&self, text: &str) -> Vec<f32>;
    /// The embedding of each text, in order: an encoder that runs many texts at once faster
    /// than one at a time overrides this.
    fn encode_batch(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        texts.iter().map(|text| self.encode(text)).collect()
    }
    /// Names the model, so that a cache never serves one model's vectors to another.
    fn model(&self) -> &str;
    /// A cheap, rough vector for `text`, compared only with other sketches: what picks the
    /// tools of a big catalogue worth encoding for a query (`shortlist`). `None`: this
    /// encoder makes none, and every tool is encoded.
    fn sketch(&self, _text: &str) -> Option<Vec<f32>> {
        None
    }
}

/// Cache key: SHA-256 of the encoded text.
pub(crate) type Key = [u8; 32];

/// The cache key of the vector of `text` (a tool's [`tool_text`]): its SHA-256.
pub(crate) fn key_of(text: &str) -> Key {
    Sha256::digest(text).into()
}

/// One vector per tool, in snapshot order.
pub type ToolVectors = Vec<Arc<[f32]>>;

/// An encoder and the tool vectors it has made; clones share both.
#[derive(Clone)]
pub struct SemanticRanker {
    encoder: Arc<dyn TextEncoder>,
    vectors: Arc<Mutex<HashMap<Key, Arc<[f32]>>>>,
    file: Option<PathBuf>,
    /// The encoding running in the background, if one is.
    job: Arc<Mutex<Option<Arc<Job>>>>,
    budget: Duration,
}

/// A background encoding: done once every text it was given has a vector.
#[derive(Default)]
struct Job {
    done: Mutex<bool>,
    finished: Condvar,
}

impl std::fmt::Debug for SemanticRanker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemanticRanker")
            .field("model", &self.encoder.model())
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl SemanticRanker {
    /// A ranker over `encoder`, keeping tool vectors in `cache_dir` when given (a file per
    /// model; an unreadable or foreign file is ignored and rewritten).
    pub fn new(encoder: Arc<dyn TextEncoder>, cache_dir: Option<PathBuf>) -> SemanticRanker {
        let file = cache_dir.map(|dir| dir.join(format!("tool-vectors-{}.bin", encoder.model())));
        let vectors = file.as_ref().map(read_cache).unwrap_or_default();
        SemanticRanker {
            encoder,
            vectors: Arc::new(Mutex::new(vectors)),
            file,
            job: Arc::default(),
            budget: ENCODE_BUDGET,
        }
    }

    /// This ranker with another wait for tool vectors than [`ENCODE_BUDGET`].
    pub fn with_budget(mut self, budget: Duration) -> SemanticRanker {
        self.budget = budget;
        self
    }

    /// The vector of every tool, in order, waiting for the encoding as long as it takes.
    pub fn tool_vectors(&self, tools: &[QualifiedTool]) -> ToolVectors {
        self.vectors_within(tools, Duration::MAX)
            .unwrap_or_default()
    }

    /// The vector of every tool, in order, if they are all made within the ranker's budget:
    /// cached ones looked up, the rest encoded on every core in the background (which goes on
    /// past the budget, saving as it goes). `None`: not yet; rank by words this time.
    pub fn tool_vectors_within(&self, tools: &[QualifiedTool]) -> Option<ToolVectors> {
        self.vectors_within(tools, self.budget)
    }

    fn vectors_within(&self, tools: &[QualifiedTool], budget: Duration) -> Option<ToolVectors> {
        let deadline = Instant::now().checked_add(budget);
        let texts: Vec<String> = tools.iter().map(tool_text).collect();
        let keys: Vec<Key> = texts.iter().map(|t| key_of(t)).collect();
        loop {
            let missing: Vec<(Key, String)> = {
                let known = self.lock();
                keys.iter()
                    .zip(&texts)
                    .filter(|(k, _)| !known.contains_key(*k))
                    .map(|(k, t)| (*k, t.clone()))
                    .collect()
            };
            if missing.is_empty() {
                let known = self.lock();
                return Some(
                    keys.iter()
                        .map(|k| {
                            known
                                .get(k)
                                .cloned()
                                .unwrap_or_else(|| Arc::from(Vec::new()))
                        })
                        .collect(),
                );
            }
            // Join the encoding under way (it may be for another catalogue: look again when it
            // ends), or start one for what is missing.
            let job = {
                let mut slot = self.job.lock().unwrap_or_else(|p| p.into_inner());
                match slot.as_ref() {
                    Some(job) => job.clone(),
                    None => {
                        let job = Arc::new(Job::default());
                        *slot = Some(job.clone());
                        let ranker = self.clone();
                        let started = job.clone();
                        std::thread::spawn(move || ranker.encode_in_background(missing, &started));
                        job
                    }
                }
            };
            let mut done = job.done.lock().unwrap_or_else(|p| p.into_inner());
            while !*done {
                let left = match deadline {
                    Some(deadline) => deadline.checked_duration_since(Instant::now())?,
                    None => Duration::from_secs(3600),
                };
                done = job
                    .finished
                    .wait_timeout(done, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    }

    /// Encodes `missing` on every core (see [`SemanticRanker::encode_now`]), saving as it goes
    /// and at the end; then marks `job` done.
    fn encode_in_background(&self, missing: Vec<(Key, String)>, job: &Job) {
        self.encode_now(&missing);
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *job.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        job.finished.notify_all();
    }

    /// Encodes `missing` on every core, a batch of [`BATCH`] texts at a time, adding each
    /// batch's vectors as they are made and saving every [`SAVE_EVERY`] and at the end.
    fn encode_now(&self, missing: &[(Key, String)]) {
        // Every search of a big catalogue comes here with its shortlist, nearly always all
        // cached: asking for the cores reads cgroup files, a tenth of a millisecond.
        if missing.is_empty() {
            return;
        }
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let next = AtomicUsize::new(0);
        let saved = Mutex::new(Instant::now());
        std::thread::scope(|scope| {
            for _ in 0..workers.min(missing.len().div_ceil(BATCH)) {
                let (saved, next) = (&saved, &next);
                scope.spawn(move || {
                    loop {
                        let start = next.fetch_add(BATCH, Ordering::Relaxed);
                        let Some(batch) = missing.get(start..(start + BATCH).min(missing.len()))
                        else {
                            break;
                        };
                        if batch.is_empty() {
                            break;
                        }
                        let texts: Vec<&str> = batch.iter().map(|(_, t)| t.as_str()).collect();
                        let vectors = self.encoder.encode_batch(&texts);
                        let mut known = self.lock();
                        for ((key, _), vector) in batch.iter().zip(vectors) {
                            known.insert(*key, vector.into());
                        }
                        let due = saved
                            .lock()
                            .map(|mut at| {
                                let due = at.elapsed() >= SAVE_EVERY;
                                if due {
                                    *at = Instant::now();
                                }
                                due
                            })
                            .unwrap_or(false);
                        if due && let Some(file) = &self.file {
                            // A cache that cannot be written costs the next run time, not
                            // correctness.
                            let _ = write_cache(file, &known);
                        }
                    }
                });
            }
        });
        if !missing.is_empty()
            && let Some(file) = &self.file
        {
            let _ = write_cache(file, &self.lock());
        }
    }

    /// The vector of each of `tools` (their [`key_of`] with the tool), in order: cached ones
    /// looked up, the rest encoded now on every core and saved (the few a shortlist needs:
    /// no budget, no background).
    pub(crate) fn vectors_of(&self, tools: &[(Key, &QualifiedTool)]) -> Vec<Arc<[f32]>> {
        let missing: Vec<(Key, String)> = {
            let known = self.lock();
            let mut missing: Vec<(Key, String)> = tools
                .iter()
                .filter(|(k, _)| !known.contains_key(k))
                .map(|(k, tool)| (*k, tool_text(tool)))
                .collect();
            missing.sort_unstable_by_key(|m| m.0);
            missing.dedup_by(|a, b| a.0 == b.0);
            missing
        };
        self.encode_now(&missing);
        let known = self.lock();
        tools
            .iter()
            .map(|(k, _)| {
                known
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| Arc::from(Vec::new()))
            })
            .collect()
    }

    /// The sketch of `text` ([`TextEncoder::sketch`]), if the encoder makes them.
    pub(crate) fn sketch(&self, text: &str) -> Option<Vec<f32>> {
        self.encoder.sketch(text)
    }

    /// The query as the encoder reads it: the request's readings, values named by kind.
    pub(crate) fn query_text(query: &str) -> String {
        values::values_as_kinds(&crate::search::request_readings(query)).into_owned()
    }

    /// The encoding of `text`, a query's ([`SemanticRanker::query_text`]).
    pub(crate) fn encode_query(&self, text: &str) -> Vec<f32> {
        self.encoder.encode(text)
    }

    /// Re-ranks: BM25's `lexical` hits (every matching tool, exact names flagged) fused with
    /// the cosine of `query` to each of `vectors` and the `routing` nudges (the kind of value
    /// the query names, the server closest to it); exact hits stay first, in their order, and
    /// the first places make room for a second server (`Routing::make_room`).
    /// A tool's BM25 z-score counts at most `MATCHED_SHARE_WEIGHT` (12) times the share of the
    /// lexical ceiling it reaches.
    pub fn fuse(
        &self,
        query: &str,
        lexical: Lexical,
        vectors: &[Arc<[f32]>],
        routing: &Routing,
        limit: usize,
    ) -> Vec<Hit> {
        let n = vectors.len();
        if n == 0 {
            return lexical.hits;
        }
        let encoded = self.encode_query(&Self::query_text(query));
        let dense: Vec<f64> = vectors.iter().map(|v| cosine(v, &encoded)).collect();
        let (z_bm25, exact) = lexical_z(&lexical, n);
        let z_dense = z_scores(&dense);
        let nudges = routing.nudges(query, &dense);
        let hits = (0..n)
            .filter(|i| !exact.iter().any(|h| h.index == *i))
            .map(|i| Hit {
                index: i,
                score: z_bm25[i]
                    + SEMANTIC_WEIGHT * z_dense[i]
                    + nudges.get(i).copied().unwrap_or(0.0),
                exact: false,
            })
            .collect();
        finish(exact, hits, routing, limit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<[f32]>>> {
        // A panic while holding the lock leaves whole entries behind; keep using them.
        self.vectors.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The dot product of two unit vectors (0 for an empty one: a vector not made), in eight f32
/// sums the compiler keeps in vector registers: a big catalogue's search scans every tool's
/// sketch with it (a millisecond less a query over 1,853 tools than summing in f64). The
/// encoder has the same loop (`math::dot`); this crate does not depend on it.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    f64::from(lanes.iter().sum::<f32>() + rest)
}

/// BM25's scores as z-scores over `n` tools, each bounded by `MATCHED_SHARE_WEIGHT` times its
/// share of the lexical ceiling, and the exact hits apart.
pub(crate) fn lexical_z(lexical: &Lexical, n: usize) -> (Vec<f64>, Vec<Hit>) {
    let mut bm25 = vec![0.0; n];
    let mut exact = Vec::new();
    for hit in &lexical.hits {
        if hit.exact {
            exact.push(hit.clone());
        } else if let Some(slot) = bm25.get_mut(hit.index) {
            *slot = hit.score;
        }
    }
    let mut z_bm25 = z_scores(&bm25);
    if lexical.ceiling > 0.0 {
        for (z, score) in z_bm25.iter_mut().zip(&bm25) {
            *z = z.min(MATCHED_SHARE_WEIGHT * score / lexical.ceiling);
        }
    }
    (z_bm25, exact)
}

/// The end of a fused ranking: `hits` best first, the `exact` ones above them all, the first
/// places making room for a second server, `limit` kept.
pub(crate) fn finish(
    mut exact: Vec<Hit>,
    mut hits: Vec<Hit>,
    routing: &Routing,
    limit: usize,
) -> Vec<Hit> {
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    // Exact hits keep a score above every other, as the lexical index gives them.
    let top = hits.first().map_or(0.0, |h| h.score);
    exact.iter_mut().for_each(|h| h.score = top + 1.0);
    exact.extend(hits);
    let mut ranked = routing.make_room(exact);
    ranked.truncate(limit);
    ranked
}

/// What the encoder reads of a tool: its qualified name as words, description and parameter
/// names (the form measured in scripts/semantic_recall.py).
pub fn tool_text(tool: &QualifiedTool) -> String {
    let mut text = split_identifiers(&tool.qualified_name).join(" ");
    text.push_str(": ");
    text.push_str(tool.tool.description.as_deref().unwrap_or(""));
    let parameters: Vec<String> = tool
        .tool
        .input_schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().map(|k| split_identifiers(k).join(" ")).collect())
        .unwrap_or_default();
    if !parameters.is_empty() {
        text.push_str(" Parameters: ");
        text.push_str(&parameters.join(", "));
    }
    text
}

fn read_cache(file: &PathBuf) -> HashMap<Key, Arc<[f32]>> {
    let mut vectors = HashMap::new();
    let Ok(bytes) = std::fs::read(file) else {
        return vectors;
    };
    let mut rest = bytes.as_slice();
    while rest.len() >= 36 {
        let (key, tail) = rest.split_at(32);
        let (length, tail) = tail.split_at(4);
        let length = u32::from_le_bytes([length[0], length[1], length[2], length[3]]) as usize;
        let Some(data) = tail.get(..length * 4) else {
            break;
        };
        let vector: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut k = [0u8; 32];
        k.copy_from_slice(key);
        vectors.insert(k, Arc::from(vector));
        rest = &tail[length * 4..];
    }
    vectors
}

fn write_cache(file: &PathBuf, vectors: &HashMap<Key, Arc<[f32]>>) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Another process may have added vectors since this one read the file: keep them too.
    let theirs = read_cache(file);
    let mut bytes = Vec::new();
    let extra = theirs.iter().filter(|(k, _)| !vectors.contains_key(*k));
    for (key, vector) in vectors.iter().chain(extra) {
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&(vector.len() as u32).to_le_bytes());
        vector
            .iter()
            .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    }
    // Another process may write the same cache: each writes whole and renames into place.
    let part = file.with_extension(format!("part{}", std::process::id()));
    std::fs::write(&part, bytes)?;
    std::fs::rename(&part, file)
}

/// A test encoder: words as axes, so texts sharing a word (after a small synonym table) point
/// the same way. Shared by this module's tests and the selection's.
#[cfg(test)]
pub(crate) struct Words;

#[cfg(test)]
impl TextEncoder for Words {
    fn encode(&self, text: &str) -> Vec<f32> {
        let axes = ["subtract", "add", "weather"];
        let text = text.to_lowercase().replace("take away", "subtract");
        let mut v: Vec<f32> = axes
            .iter()
            .map(|a| if text.contains(a) { 1.0 } else { 0.0 })
            .collect();
        v.push(0.1);
        let length = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / length).collect()
    }
    fn model(&self) -> &str {
        "words"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> QualifiedTool {
        QualifiedTool {
            qualified_name: format!("math__{name}"),
            server: "math".into(),
            tool: serde_json::from_value(json!({"name": name, "description": description}))
                .unwrap(),
        }
    }

    #[test]
    fn meaning_outranks_a_shared_word_and_exact_names_stay_first() {
        let tools = vec![
            tool("add", "Add two numbers."),
            tool("subtract", "Subtract two numbers."),
            tool("multiply", "Multiply two numbers."),
            tool("forecast", "Weather for the week."),
        ];
        let ranker = SemanticRanker::new(Arc::new(Words), None);
        let vectors = ranker.tool_vectors(&tools);
        let hit = |index, score| Hit {
            index,
            score,
            exact: false,
        };
        // "numbers" matches every arithmetic tool, `add` a little better (a shorter text).
        let lexical = vec![hit(0, 1.2), hit(1, 1.0), hit(2, 1.0)];
        let hits = ranker.fuse(
            "take away 9 from 30 numbers",
            Lexical {
                hits: lexical.clone(),
                ceiling: 0.0,
            },
            &vectors,
            &Routing::new(&tools, &vectors),
            4,
        );
        assert_eq!(hits[0].index, 1, "{hits:?}");
        assert_eq!(hits[3].index, 3, "{hits:?}");
        let mut named = lexical;
        named.push(Hit {
            index: 3,
            score: 9.0,
            exact: true,
        });
        let hits = ranker.fuse(
            "take away 9 from 30 numbers",
            Lexical {
                hits: named,
                ceiling: 0.0,
            },
            &vectors,
            &Routing::new(&tools, &vectors),
            4,
        );
        assert_eq!((hits[0].index, hits[0].exact), (3, true), "{hits:?}");
        assert_eq!(hits[1].index, 1);
    }

    /// Among many tools, one matching a single incidental word of the request no longer
    /// outranks the one meaning what it asks; matching the whole request still counts in full.
    #[test]
    fn a_word_matched_in_passing_counts_for_its_share_of_the_request() {
        let mut tools = vec![
            tool("opening_hours", "The hours a museum opens."),
            tool("subtract", "Subtract two numbers."),
        ];
        // Twenty tools close in meaning keep the subtraction's own z-score in meaning modest.
        tools.extend((0..20).map(|i| tool(&format!("minus_{i}"), "Subtract other things.")));
        tools.extend((0..180).map(|i| tool(&format!("other_{i}"), "Something unrelated.")));
        let ranker = SemanticRanker::new(Arc::new(Words), None);
        let vectors = ranker.tool_vectors(&tools);
        let routing = Routing::new(&tools, &vectors);
        let query = "take away the hours from 30";
        let matched = |ceiling| Lexical {
            hits: vec![Hit {
                index: 0,
                score: 2.0,
                exact: false,
            }],
            ceiling,
        };
        // Alone among 202 tools, one matching word is a z-score past 14: it wins unbounded.
        let unbounded = ranker.fuse(query, matched(0.0), &vectors, &routing, 2);
        assert_eq!(unbounded[0].index, 0, "{unbounded:?}");
        // "hours" is a sixth of what the request's telling words could score.
        let bounded = ranker.fuse(query, matched(12.0), &vectors, &routing, 2);
        assert_eq!(bounded[0].index, 1, "{bounded:?}");
        // A tool matching all of it keeps its whole z-score.
        let whole = ranker.fuse(query, matched(2.0), &vectors, &routing, 2);
        assert_eq!(whole[0].index, 0, "{whole:?}");
    }

    /// A clear winner is offered alone; a close second stays; words alone keep their top k.
    #[test]
    fn pre_selection_keeps_only_the_tools_close_to_the_best() {
        let servers = || {
            vec![crate::ServerTools {
                server: "math".into(),
                tools: vec![
                    tool("add", "Add two numbers.").tool,
                    tool("subtract", "Subtract two numbers.").tool,
                    tool("multiply", "Multiply two numbers.").tool,
                    tool("forecast", "Weather for the week.").tool,
                ],
                always_load: false,
            }]
        };
        let semantic = crate::Snapshot::new(servers())
            .with_semantic(Some(SemanticRanker::new(Arc::new(Words), None)));
        let names = |hits: Vec<Hit>| -> Vec<usize> { hits.iter().map(|h| h.index).collect() };
        assert_eq!(
            names(semantic.search_close("take away 9 from 30", 3, 1.0)),
            [1]
        );
        assert_eq!(semantic.search("take away 9 from 30", 3).len(), 3);
        // A wide margin keeps all three.
        assert_eq!(
            semantic.search_close("take away 9 from 30", 3, 100.0).len(),
            3
        );
        // Naming a tool exactly offers that tool alone.
        assert_eq!(names(semantic.search_close("math__add", 3, 100.0)), [0]);
        // BM25's scores are not on one scale: its best k stay.
        let lexical = crate::Snapshot::new(servers());
        assert_eq!(lexical.search_close("numbers", 3, 0.0).len(), 3);
    }

    #[test]
    fn vectors_are_cached_on_disk_per_tool_text() {
        let dir = std::env::temp_dir().join(format!("tether-vectors-{}", std::process::id()));
        let tools = vec![tool("add", "Add two numbers.")];
        let first = SemanticRanker::new(Arc::new(Words), Some(dir.clone()));
        let made = first.tool_vectors(&tools);
        let again = SemanticRanker::new(Arc::new(Words), Some(dir.clone()));
        assert_eq!(again.lock().len(), 1, "the second ranker read the cache");
        assert_eq!(again.tool_vectors(&tools)[0], made[0]);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// An encoder that takes its time.
    struct Slow;

    impl TextEncoder for Slow {
        fn encode(&self, text: &str) -> Vec<f32> {
            std::thread::sleep(Duration::from_millis(20));
            Words.encode(text)
        }
        fn model(&self) -> &str {
            "slow"
        }
    }

    /// Past the budget a search gets no vectors (it ranks by words), while the encoding goes
    /// on in the background and saves what it made; a later search finds them all.
    #[test]
    fn past_the_budget_vectors_wait_for_a_later_search_and_are_saved_meanwhile() {
        let dir = std::env::temp_dir().join(format!("tether-vectors-slow-{}", std::process::id()));
        let tools: Vec<QualifiedTool> = (0..200)
            .map(|i| tool(&format!("t{i}"), "Adds two numbers."))
            .collect();
        let ranker = SemanticRanker::new(Arc::new(Slow), Some(dir.clone()))
            .with_budget(Duration::from_millis(100));
        let started = Instant::now();
        assert!(
            ranker.tool_vectors_within(&tools).is_none(),
            "4 s of encoding within 0.1 s"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let all = ranker.tool_vectors(&tools);
        assert_eq!(all.len(), 200);
        assert!(all.iter().all(|v| !v.is_empty()));
        assert!(ranker.tool_vectors_within(&tools).is_some());
        let again = SemanticRanker::new(Arc::new(Slow), Some(dir.clone()));
        assert_eq!(again.lock().len(), 200, "saved for the next run");
        let _ = std::fs::remove_dir_all(dir);
    }
}
