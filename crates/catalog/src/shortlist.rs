//! A big catalogue ranked in two stages, so that its first search does not wait for every
//! tool's vector. Encoding a tool takes milliseconds on a CPU without VNNI (BFCL's 1,853
//! tools about 10 s on two cores); a sketch ([`TextEncoder::sketch`](crate::semantic::TextEncoder::sketch):
//! the words' embeddings averaged, no layers) takes microseconds. So:
//!
//! 1. a sample gets its full vectors once per snapshot (cached, or encoded and saved):
//!    [`SAMPLE`] tools spread evenly over the catalogue, whose cosines to the query give the
//!    mean and spread of the query's cosine over the whole catalogue (an unbiased estimate, as
//!    the fused ranking of a small catalogue takes it over every tool), and each server's share
//!    of the sample (every tool of a small server), whose mean is the server's centroid for the
//!    routing nudge: closeness from sketches lost recall;
//! 2. every tool is ranked as the fused ranking does, with sketches in place of vectors:
//!    BM25's bounded z-score, the sketches' cosine to the query's sketch as a z-score, and the
//!    routing nudges;
//! 3. the first [`SHORTLIST`] of that ranking get their full vectors and are ranked by the
//!    fused score with the full cosine as a z-score against the sample's mean and spread; the
//!    rest follow in their first-stage order.
//!
//! The ranking is the same whether the vectors were cached or not: a catalogue over
//! [`SHORTLIST_ABOVE`] tools is always ranked this way, and only the tools a search ever
//! shortlists or samples are ever encoded.

use std::sync::{Arc, OnceLock};

use tether_protocol::QualifiedTool;

use crate::routing::{Routing, z_scores};
use crate::search::{Hit, Lexical};
use crate::semantic::{Key, SEMANTIC_WEIGHT, SemanticRanker, cosine, finish, key_of, lexical_z};

/// Catalogues with more tools than this are ranked in two stages; smaller ones have every
/// tool encoded (a shortlist and sample would be most of them anyway).
pub const SHORTLIST_ABOVE: usize = 512;

/// Tools the first stage passes to the second.
const SHORTLIST: usize = 96;

/// Tools encoded, evenly spread over the catalogue, to estimate the mean and spread of the
/// query's cosine to every tool; as many again spread over the servers, for their centroids.
const SAMPLE: usize = 128;

/// The fewest of each server's tools its centroid is worked out from.
const PER_SERVER: usize = 2;

/// Every tool's sketch and vector cache key, and the routing facts worked out from the
/// sketches: made once per snapshot; the sample's vectors on its first search.
#[derive(Debug)]
pub struct Sketches {
    /// Every tool's sketch in i8, one after another, `width` bytes each with a scale in
    /// `scales`: one block read straight through by every search (scattered, they took a
    /// fifth of a millisecond more). By then the cache holds the encoder's weights, so the
    /// block comes from memory: 2.8 MB in f32 over BFCL's 1,853 tools took a quarter of a
    /// millisecond a search, the 0.7 MB of bytes 0.13 ms.
    bytes: Vec<i8>,
    scales: Vec<f32>,
    width: usize,
    keys: Vec<Key>,
    routing: Routing,
    sampled: OnceLock<Sampled>,
}

/// The sample's vectors ([`sample`]): the even part's, and each server's centroid direction
/// (the mean of its sampled tools' vectors, unit length).
#[derive(Debug)]
struct Sampled {
    even: Vec<Arc<[f32]>>,
    centroids: Vec<Vec<f32>>,
}

impl Sampled {
    /// From the `vectors` of the tools `sample`, whose first `even` are the even part.
    fn new(routing: &Routing, sample: &[usize], even: usize, vectors: Vec<Arc<[f32]>>) -> Sampled {
        let width = vectors.iter().map(|v| v.len()).max().unwrap_or(0);
        let mut centroids = vec![vec![0f32; width]; routing.servers()];
        for (i, vector) in sample.iter().zip(&vectors) {
            if let Some(centroid) = routing
                .server_of()
                .get(*i)
                .and_then(|s| centroids.get_mut(*s))
            {
                centroid
                    .iter_mut()
                    .zip(vector.iter())
                    .for_each(|(c, v)| *c += v);
            }
        }
        for centroid in &mut centroids {
            let length = cosine(centroid, centroid).sqrt().max(1e-9) as f32;
            centroid.iter_mut().for_each(|c| *c /= length);
        }
        let mut even_vectors = vectors;
        even_vectors.truncate(even);
        Sampled {
            even: even_vectors,
            centroids,
        }
    }
}

impl Sketches {
    /// The sketches of `tools`, or `None` when the ranker's encoder makes none.
    pub fn new(ranker: &SemanticRanker, tools: &[QualifiedTool]) -> Option<Sketches> {
        let (mut flat, mut width) = (Vec::new(), 0);
        let mut keys = Vec::with_capacity(tools.len());
        for tool in tools {
            // One text per tool for both its sketch and its vector's cache key.
            let text = crate::semantic::tool_text(tool);
            let sketch = ranker.sketch(&text)?;
            if keys.is_empty() {
                width = sketch.len();
                flat.reserve(width * tools.len());
            }
            // Sketches of one encoder share its width; each is cut or padded to it all the
            // same, so that a tool's sketch is always at its index.
            flat.extend((0..width).map(|d| sketch.get(d).copied().unwrap_or(0.0)));
            keys.push(key_of(&text));
        }
        let sketches: Vec<&[f32]> = flat.chunks_exact(width.max(1)).collect();
        let routing = Routing::new(tools, &sketches);
        let (bytes, scales) = quantize(&flat, width);
        Some(Sketches {
            bytes,
            scales,
            width,
            keys,
            routing,
            sampled: OnceLock::new(),
        })
    }

    /// The cosine of `query` (a sketch) to every tool's sketch, in the tools' order: in
    /// integers, the query taken to i16, each sum exact.
    fn cosines(&self, query: &[f32]) -> Vec<f64> {
        let largest = query.iter().fold(0f32, |m, v| m.max(v.abs()));
        let query_scale = if largest > 0.0 {
            largest / 32767.0
        } else {
            1.0
        };
        // Within ±32767 by the scale's choice; `as` saturates all the same.
        let steps: Vec<i16> = query
            .iter()
            .map(|v| (v / query_scale).round() as i16)
            .collect();
        self.bytes
            .chunks_exact(self.width.max(1))
            .zip(&self.scales)
            .map(|(row, scale)| dot_steps(row, &steps) as f64 * f64::from(scale * query_scale))
            .collect()
    }
}

/// Rows of `width` floats in i8, each scaled so that its largest magnitude is 127: the bytes
/// and each row's scale (its value per step).
fn quantize(flat: &[f32], width: usize) -> (Vec<i8>, Vec<f32>) {
    let mut bytes = Vec::with_capacity(flat.len());
    let mut scales = Vec::with_capacity(flat.len() / width.max(1));
    for row in flat.chunks_exact(width.max(1)) {
        let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
        // Within -127..=127 by the scale's choice; `as` saturates all the same.
        bytes.extend(row.iter().map(|v| (v / scale).round() as i8));
        scales.push(scale);
    }
    (bytes, scales)
}

/// `row · query` in integers: eight i32 lanes of i16 products, which the compiler keeps in
/// registers (at most 127 × 32767 each, so a lane's sum stays under 2^31 for sketches of up to
/// 4,000 floats).
fn dot_steps(row: &[i8], query: &[i16]) -> i64 {
    let mut lanes = [0i32; 8];
    let (rows, queries) = (row.chunks_exact(8), query.chunks_exact(8));
    let rest: i64 = rows
        .remainder()
        .iter()
        .zip(queries.remainder())
        .map(|(r, q)| i64::from(*r) * i64::from(*q))
        .sum();
    for (r, q) in rows.zip(queries) {
        for i in 0..8 {
            lanes[i] = lanes[i].wrapping_add(i32::from(r[i]) * i32::from(q[i]));
        }
    }
    lanes.iter().map(|l| i64::from(*l)).sum::<i64>() + rest
}

/// The best `limit` of `tools` for `query` in two stages (the module's account), from BM25's
/// `lexical` hits over every tool.
pub fn rank(
    ranker: &SemanticRanker,
    sketches: &Sketches,
    tools: &[QualifiedTool],
    query: &str,
    lexical: Lexical,
    limit: usize,
) -> Vec<Hit> {
    let n = tools.len();
    let text = SemanticRanker::query_text(query);
    let Some(query_sketch) = ranker.sketch(&text) else {
        return lexical.hits;
    };
    let encoded = ranker.encode_query(&text);
    let routing = &sketches.routing;
    let with_keys = |indices: &[usize]| -> Vec<(Key, &QualifiedTool)> {
        indices
            .iter()
            .filter_map(|i| Some((*sketches.keys.get(*i)?, tools.get(*i)?)))
            .collect()
    };
    let sampled = sketches.sampled.get_or_init(|| {
        let (sample, even) = sample(routing.server_of(), routing.servers());
        Sampled::new(
            routing,
            &sample,
            even,
            ranker.vectors_of(&with_keys(&sample)),
        )
    });
    let even_dense: Vec<f64> = sampled.even.iter().map(|v| cosine(v, &encoded)).collect();
    let mean = even_dense.iter().sum::<f64>() / even_dense.len().max(1) as f64;
    let spread = (even_dense
        .iter()
        .map(|d| (d - mean) * (d - mean))
        .sum::<f64>()
        / even_dense.len().max(1) as f64)
        .sqrt();
    let closeness: Vec<f64> = sampled
        .centroids
        .iter()
        .map(|c| cosine(c, &encoded))
        .collect();
    let nudges = routing.nudges_by(query, Some(&closeness));

    let (z_bm25, exact) = lexical_z(&lexical, n);
    let rough = sketches.cosines(&query_sketch);
    let z_rough = z_scores(&rough);
    let first: Vec<f64> = (0..n)
        .map(|i| z_bm25[i] + SEMANTIC_WEIGHT * z_rough[i] + nudges.get(i).copied().unwrap_or(0.0))
        .collect();
    let mut order: Vec<usize> = (0..n)
        .filter(|i| !exact.iter().any(|h| h.index == *i))
        .collect();
    let short = order.len().min(SHORTLIST);
    // Only which tools are in the shortlist matters here: the final ranking sorts them all.
    if short > 0 && short < order.len() {
        order.select_nth_unstable_by(short - 1, |a, b| {
            first[*b].total_cmp(&first[*a]).then(a.cmp(b))
        });
    }
    let wanted = with_keys(&order[..short]);
    let dense: Vec<f64> = ranker
        .vectors_of(&wanted)
        .iter()
        .map(|v| cosine(v, &encoded))
        .collect();
    let mut hits: Vec<Hit> = order[..short]
        .iter()
        .zip(&dense)
        .map(|(&i, d)| Hit {
            index: i,
            score: z_bm25[i]
                + SEMANTIC_WEIGHT * (d - mean) / (spread + 1e-9)
                + nudges.get(i).copied().unwrap_or(0.0),
            exact: false,
        })
        .collect();
    // The rest keep their first-stage order, below the whole shortlist; only a search for
    // more than the shortlist holds sees them, so the others skip sorting them (a tenth of a
    // millisecond over 1,853 tools).
    if limit <= short {
        return finish(exact, hits, routing, limit);
    }
    let floor = hits.iter().map(|h| h.score).fold(f64::INFINITY, f64::min);
    let below = order[short..]
        .iter()
        .map(|i| first[*i])
        .fold(f64::NEG_INFINITY, f64::max);
    hits.extend(order[short..].iter().map(|&i| Hit {
        index: i,
        score: floor - 1.0 - (below - first[i]),
        exact: false,
    }));
    finish(exact, hits, routing, limit)
}

/// Which tools a search encodes besides its shortlist, as indices, and how many of the first
/// are the even sample: [`SAMPLE`] spread evenly over the catalogue (for the cosine's mean and
/// spread), then more of each server's tools, evenly over them, until it has its quota of
/// the sample (for its centroid; every tool of a small server).
fn sample(server_of: &[usize], servers: usize) -> (Vec<usize>, usize) {
    let n = server_of.len();
    let servers = servers.max(1);
    let quota = (SAMPLE / servers).max(PER_SERVER);
    let mut members = vec![0usize; servers];
    for server in server_of {
        members[(*server).min(servers - 1)] += 1;
    }
    let even_count = SAMPLE.min(n);
    let mut sampled = vec![false; n];
    let mut taken = vec![0usize; servers];
    let mut sample: Vec<usize> = (0..even_count).map(|i| i * n / even_count).collect();
    for &i in &sample {
        sampled[i] = true;
        taken[server_of[i].min(servers - 1)] += 1;
    }
    let mut seen = vec![0usize; servers];
    for (i, server) in server_of.iter().enumerate() {
        let server = (*server).min(servers - 1);
        let members = members[server].max(1);
        // The server's tools at which `seen × quota / members` steps up are evenly spread.
        let due = seen[server] * quota / members;
        seen[server] += 1;
        if taken[server] < quota && seen[server] * quota / members > due && !sampled[i] {
            taken[server] += 1;
            sampled[i] = true;
            sample.push(i);
        }
    }
    (sample, even_count)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::semantic::{TextEncoder, Words};
    use crate::{ServerTools, Snapshot};

    /// The sketches' cosines in integers are the float ones to within a thousandth, for unit
    /// vectors of the encoder's width and a ragged one.
    #[test]
    fn sketch_cosines_in_bytes_stay_close_to_the_float_ones() {
        for width in [384, 45] {
            let unit = |seed: f32| {
                let v: Vec<f32> = (0..width).map(|i| (i as f32 * seed).sin() + 0.1).collect();
                let length = cosine(&v, &v).sqrt() as f32;
                v.into_iter().map(|x| x / length).collect::<Vec<f32>>()
            };
            let rows: Vec<Vec<f32>> = [0.3, 0.7, 1.1, 0.31, 2.9].map(unit).to_vec();
            let flat: Vec<f32> = rows.concat();
            let (bytes, scales) = quantize(&flat, width);
            let sketches = Sketches {
                bytes,
                scales,
                width,
                keys: Vec::new(),
                routing: Routing::new::<Vec<f32>>(&[], &[]),
                sampled: OnceLock::new(),
            };
            let query = unit(0.3);
            let found = sketches.cosines(&query);
            assert_eq!(found.len(), rows.len());
            for (row, got) in rows.iter().zip(&found) {
                let exact = cosine(row, &query);
                assert!(
                    (got - exact).abs() < 1e-3,
                    "width {width}: {got} vs {exact}"
                );
            }
            assert!(found[0] > 0.999 && found[0] > found[3], "{found:?}");
        }
    }

    /// [`Words`], counting the tool texts it encodes, with sketches when `sketches`.
    struct Counting {
        encoded: AtomicUsize,
        sketches: bool,
        texts: Mutex<Vec<String>>,
    }

    impl Counting {
        fn new(sketches: bool) -> Arc<Counting> {
            Arc::new(Counting {
                encoded: AtomicUsize::new(0),
                sketches,
                texts: Mutex::default(),
            })
        }
    }

    impl TextEncoder for Counting {
        fn encode(&self, text: &str) -> Vec<f32> {
            Words.encode(text)
        }
        fn encode_batch(&self, texts: &[&str]) -> Vec<Vec<f32>> {
            self.encoded.fetch_add(texts.len(), Ordering::Relaxed);
            let mut seen = self.texts.lock().unwrap();
            seen.extend(texts.iter().map(|t| t.to_string()));
            texts.iter().map(|t| Words.encode(t)).collect()
        }
        fn model(&self) -> &str {
            "counting"
        }
        fn sketch(&self, text: &str) -> Option<Vec<f32>> {
            self.sketches.then(|| Words.encode(text))
        }
    }

    /// A catalogue over [`SHORTLIST_ABOVE`]: filler tools on three servers, and an arithmetic
    /// server whose `subtract` only meaning finds for "take away".
    fn big_catalogue() -> Vec<ServerTools> {
        let filler = |server: &str, from: usize| ServerTools {
            server: server.into(),
            tools: (from..from + 200)
                .map(|i| {
                    serde_json::from_value(json!({
                        "name": format!("record_{i}"),
                        "description": format!("Keeps entry {i} of the ledger.")
                    }))
                    .unwrap()
                })
                .collect(),
            always_load: false,
        };
        let mut servers = vec![filler("ledger", 0), filler("journal", 200)];
        servers.push(ServerTools {
            server: "math".into(),
            tools: ["add", "subtract", "multiply"]
                .iter()
                .map(|name| {
                    serde_json::from_value(json!({
                        "name": name,
                        "description": format!("{name} two numbers")
                    }))
                    .unwrap()
                })
                .collect(),
            always_load: false,
        });
        servers.push(filler("archive", 400));
        servers
    }

    #[test]
    fn a_big_catalogue_encodes_its_shortlist_and_sample_only_and_finds_the_meaning() {
        let encoder = Counting::new(true);
        let snapshot = Snapshot::new(big_catalogue())
            .with_semantic(Some(SemanticRanker::new(encoder.clone(), None)));
        assert!(snapshot.tools().len() > SHORTLIST_ABOVE);
        let hits = snapshot.search("take away 9 from 30", 3);
        assert_eq!(
            snapshot.tools()[hits[0].index].tool.name,
            "subtract",
            "{hits:?}"
        );
        let encoded = encoder.encoded.load(Ordering::Relaxed);
        assert!(
            encoded <= SHORTLIST + 2 * SAMPLE,
            "{encoded} of {} tools encoded",
            snapshot.tools().len()
        );
        // The small server is sampled whole, for its centroid.
        let texts = encoder.texts.lock().unwrap();
        for name in ["add", "subtract", "multiply"] {
            assert!(
                texts
                    .iter()
                    .any(|t| t.starts_with(&format!("math {name}:")))
            );
        }
        drop(texts);
        // A second search with the vectors in memory encodes nothing new for the same query,
        // and ranks the same.
        assert_eq!(snapshot.search("take away 9 from 30", 3), hits);
        assert_eq!(encoder.encoded.load(Ordering::Relaxed), encoded);
    }

    #[test]
    fn an_encoder_without_sketches_has_every_tool_encoded() {
        let encoder = Counting::new(false);
        let snapshot = Snapshot::new(big_catalogue())
            .with_semantic(Some(SemanticRanker::new(encoder.clone(), None)));
        let hits = snapshot.search("take away 9 from 30", 3);
        assert_eq!(snapshot.tools()[hits[0].index].tool.name, "subtract");
        assert_eq!(
            encoder.encoded.load(Ordering::Relaxed),
            snapshot.tools().len()
        );
    }

    #[test]
    fn the_sample_spreads_over_the_catalogue_and_takes_small_servers_whole() {
        // 1,000 tools of one server, then 5 of another, then 20 of a third.
        let server_of: Vec<usize> = std::iter::repeat_n(0, 1000)
            .chain(std::iter::repeat_n(1, 5))
            .chain(std::iter::repeat_n(2, 20))
            .collect();
        let (sample, even) = sample(&server_of, 3);
        assert_eq!(even, SAMPLE);
        let mut sorted = sample.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), sample.len(), "no tool twice");
        let of = |server: usize| sample.iter().filter(|i| server_of[**i] == server).count();
        assert_eq!((of(1), of(2)), (5, 20), "small servers whole");
        assert!(of(0) >= SAMPLE - 25, "{}", of(0));
        // The even part reaches the end of the catalogue.
        assert!(sample[..even].iter().any(|i| *i > 900));
    }
}
