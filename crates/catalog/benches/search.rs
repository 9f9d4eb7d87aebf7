//! Tool-search benchmark over the BFCL v4 fixture (`peers/bfcl`, built by
//! scripts/install-peers.sh): every BFCL function as one server's tools, and the questions of
//! simple_python, multiple, parallel and parallel_multiple. Prints recall@1, recall@5 (every
//! expected function in the top 5) and MRR for plain BM25 and for the shipped ranking, the
//! tokens of tool definitions per request in each mode, and the time to build the index and
//! to rank every tool for one query (median and spread of interleaved rounds).
//!
//! Then questions phrased the way people write them ("what's in my notes.txt?", "forget
//! everything about Bob") against the 55 tools of the pinned reference servers
//! (`benches/fixtures/user_phrasing.json`: everything, filesystem, memory, time, sqlite and the
//! built-in server, as `tether tools --json` listed them), alone and hidden among the BFCL tools.
//! A question counts as found when any of the tools that do what it asks is in the top k.
//! Then a second development set of such questions (`benches/fixtures/user_phrasing_dev2.json`),
//! written after the first forty were all found, and a third (`user_phrasing_dev3.json`) written
//! once the second was all found too, and a fourth (`user_phrasing_dev4.json`) once the third
//! nearly was, and a fifth (`user_phrasing_dev5.json`) once the fourth mostly was, and a sixth
//! (`user_phrasing_dev6.json`) once the second to fifth nearly all were, and a seventh
//! (`user_phrasing_dev7.json`) once the sixth was, and an eighth (`user_phrasing_dev8.json`) once
//! the seventh nearly all was, and a ninth (`user_phrasing_dev9.json`) once the eighth all was,
//! and a tenth (`user_phrasing_dev10.json`) once the ninth nearly all was, and an eleventh
//! (`user_phrasing_dev11.json`) once the tenth all was.
//! Then 30 more such questions (`benches/fixtures/user_phrasing_heldout.json`), written after
//! the lexical ranking last changed, before semantic ranking, and never tuned on.
//!
//! Then BFCL's simple_python and multiple questions again with the reference servers beside
//! BFCL's tools: the guard that favouring a person's small servers (server-first routing)
//! does not push a big server's right tools down.
//!
//! Then MetaTool's ToolE (`benches/fixtures/toole.json`, MIT; scripts/make-toole-fixture.py):
//! 199 tools of the OpenAI plugin store and six user queries per tool, three for development
//! and three held out (`TETHER_BENCH_ONLY=toole` runs this part alone).
//!
//! Every ranking is shown three ways: plain BM25, the lexical ranking alone, and with semantic
//! ranking (the default), which needs the encoder `tether model pull` fetches.
//!
//! `cargo bench -p tether-catalog --bench search`; `TETHER_BENCH_ONLY=phrasing` skips BFCL's
//! categories and the timings (half a minute); `TETHER_BENCH_MISSES=1` lists the development
//! questions missed (never the held-out ones: reading them would be tuning on them).

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tether_catalog::{
    Ranking, SearchIndex, SearchTools, SelectionMode, SelectionOptions, SemanticRanker,
    ServerTools, Snapshot, TextEncoder, ToolSelection, estimate_tokens, tokens_per_mode,
};
use tether_encoder::SentenceEncoder;
use tether_protocol::Tool;

struct Question {
    category: String,
    text: String,
    expected: Vec<String>,
    /// The definitions this question was written against (BFCL reuses names for different
    /// functions across questions; tools.json keeps the first definition of each name).
    functions: Vec<Tool>,
}

fn load() -> (Vec<Tool>, Vec<Question>) {
    let dir = test_support::workspace_root().join("peers/bfcl");
    let read = |name: &str| -> Value {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run scripts/install-peers.sh first",
                path.display()
            )
        });
        serde_json::from_str(&text).unwrap()
    };
    let tools: Vec<Tool> = serde_json::from_value(read("tools.json")).unwrap();
    let questions = read("questions.json")
        .as_array()
        .unwrap()
        .iter()
        .map(|q| Question {
            category: q["category"].as_str().unwrap().into(),
            text: q["question"].as_str().unwrap().into(),
            expected: q["expected"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect(),
            functions: serde_json::from_value(q["functions"].clone())
                .expect("questions.json without definitions: run scripts/install-peers.sh"),
        })
        .collect();
    (tools, questions)
}

fn snapshot(tools: &[Tool], ranking: Ranking) -> Snapshot {
    snapshot_with(tools, ranking, None, &[])
}

/// BFCL's tools as one server, with `beside` (other servers) after it.
fn snapshot_with(
    tools: &[Tool],
    ranking: Ranking,
    semantic: Option<&SemanticRanker>,
    beside: &[ServerTools],
) -> Snapshot {
    let mut servers = vec![ServerTools {
        server: "bfcl".into(),
        tools: tools.to_vec(),
        always_load: false,
    }];
    servers.extend(beside.iter().cloned());
    Snapshot::with_ranking(servers, ranking).with_semantic(semantic.cloned())
}

/// all-MiniLM-L6-v2 as the catalogue's encoder.
struct MiniLm(SentenceEncoder);

impl TextEncoder for MiniLm {
    fn encode(&self, text: &str) -> Vec<f32> {
        self.0.embed(text)
    }
    fn encode_batch(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        self.0.embed_batch(texts)
    }
    fn model(&self) -> &str {
        tether_encoder::MODEL
    }
    fn sketch(&self, text: &str) -> Option<Vec<f32>> {
        Some(self.0.sketch(text))
    }
}

/// The semantic ranker over the encoder `tether model pull` caches, its tool vectors cached
/// in `target/tool-vectors` between runs (`TETHER_BENCH_COLD=1` encodes every tool afresh).
fn semantic_ranker() -> Option<SemanticRanker> {
    let vectors = test_support::workspace_root().join("target/tool-vectors");
    if std::env::var_os("TETHER_BENCH_COLD").is_some() {
        let _ = std::fs::remove_dir_all(&vectors);
    }
    match SentenceEncoder::load(&test_support::encoder_dir()) {
        Ok(encoder) => Some(SemanticRanker::new(
            Arc::new(MiniLm(encoder)),
            Some(vectors),
        )),
        Err(e) => {
            println!("(no semantic ranking: {e}; run `tether model pull`)");
            None
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Scores {
    n: usize,
    at1: usize,
    at5: usize,
    reciprocal: f64,
}

/// The catalogue a question is ranked in: every BFCL function, with the definitions the
/// question was written against in place of others of the same name. `None` when they are the
/// ones tools.json holds already (most questions), so the shared snapshot serves.
fn own_catalogue(
    tools: &[Tool],
    question: &Question,
    ranking: Ranking,
    semantic: Option<&SemanticRanker>,
    beside: &[ServerTools],
) -> Option<Snapshot> {
    let differs = |own: &Tool| tools.iter().any(|t| t.name == own.name && t != own);
    if !question.functions.iter().any(differs) {
        return None;
    }
    let replaced: Vec<Tool> = tools
        .iter()
        .map(|t| {
            question
                .functions
                .iter()
                .find(|own| own.name == t.name)
                .unwrap_or(t)
                .clone()
        })
        .collect();
    Some(snapshot_with(&replaced, ranking, semantic, beside))
}

fn score(
    tools: &[Tool],
    ranking: Ranking,
    semantic: Option<&SemanticRanker>,
    questions: &[&Question],
    beside: &[ServerTools],
) -> Scores {
    let shared = snapshot_with(tools, ranking, semantic, beside);
    let mut scores = Scores::default();
    for question in questions {
        let own = own_catalogue(tools, question, ranking, semantic, beside);
        let snapshot = own.as_ref().unwrap_or(&shared);
        let ranked: Vec<&str> = snapshot
            .search(&question.text, 50)
            .iter()
            .map(|h| snapshot.tools()[h.index].tool.name.as_str())
            .collect();
        let rank = |name: &str| ranked.iter().position(|r| *r == name);
        let ranks: Vec<Option<usize>> = question.expected.iter().map(|e| rank(e)).collect();
        scores.n += 1;
        scores.at1 += usize::from(ranks.contains(&Some(0)));
        scores.at5 += usize::from(ranks.iter().all(|r| r.is_some_and(|r| r < 5)));
        if let Some(best) = ranks.iter().flatten().min() {
            scores.reciprocal += 1.0 / (*best as f64 + 1.0);
        }
    }
    scores
}

/// BFCL's own questions with the reference servers' tools beside BFCL's: what favours a
/// person's small servers (the server-level routing) must not push the big server's right
/// tools down when the question is meant for it.
fn beside_reference(
    tools: &[Tool],
    questions: &[Question],
    reference: &[ServerTools],
    ranker: &SemanticRanker,
) {
    println!(
        "\nBFCL's questions with the {} reference servers beside its tools (+sem):",
        reference.len()
    );
    println!(
        "{:<18} {:>5} | {:>9} {:>6} {:>6} | {:>9} {:>6} {:>6}",
        "category", "n", "alone r@1", "r@5", "MRR", "beside r@1", "r@5", "MRR"
    );
    for category in ["simple_python", "multiple"] {
        let subset: Vec<&Question> = questions
            .iter()
            .filter(|q| q.category == category)
            .collect();
        let cells: Vec<String> = [&[][..], reference]
            .iter()
            .map(|beside| {
                let s = score(tools, Ranking::from_env(), Some(ranker), &subset, beside);
                format!(
                    "{:>9.3} {:>6.3} {:>6.3}",
                    s.at1 as f64 / s.n as f64,
                    s.at5 as f64 / s.n as f64,
                    s.reciprocal / s.n as f64
                )
            })
            .collect();
        println!("{category:<18} {:>5} | {}", subset.len(), cells.join(" | "));
    }
}

/// The reference servers' tools by server, and the user-phrased questions with the qualified
/// names of the tools that would answer each.
fn user_phrasing() -> (Vec<ServerTools>, Vec<(String, Vec<String>)>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/fixtures/user_phrasing.json");
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut servers: Vec<ServerTools> = Vec::new();
    for tool in data["tools"].as_array().unwrap() {
        let server = tool["server"].as_str().unwrap().to_string();
        let parsed: Tool = serde_json::from_value(tool.clone()).unwrap();
        match servers.iter_mut().find(|s| s.server == server) {
            Some(entry) => entry.tools.push(parsed),
            None => servers.push(ServerTools {
                server,
                tools: vec![parsed],
                always_load: false,
            }),
        }
    }
    let questions = phrased_questions(&data);
    (servers, questions)
}

/// Each question and the qualified names of the tools that would answer it.
fn phrased_questions(data: &Value) -> Vec<(String, Vec<String>)> {
    data["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let any_of = q["any_of"].as_array().unwrap();
            (
                q["question"].as_str().unwrap().to_string(),
                any_of
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

/// A further set of user-phrased questions over the reference servers' tools, from a fixture
/// that holds only questions: the second to eleventh development sets
/// (`user_phrasing_dev2.json` to `user_phrasing_dev11.json`) or the
/// held-out one (`user_phrasing_heldout.json`, written after the ranking was last changed and
/// never tuned on).
fn more_phrasing(file: &str) -> Vec<(String, Vec<String>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/fixtures")
        .join(file);
    phrased_questions(&serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
}

/// (found at 1, found in the top 5, misses at 5) for user-phrased questions.
fn score_any(
    snapshot: &Snapshot,
    questions: &[(String, Vec<String>)],
) -> (usize, usize, Vec<String>) {
    let (mut at1, mut at5, mut misses) = (0, 0, Vec::new());
    for (question, any_of) in questions {
        let ranked: Vec<&str> = snapshot
            .search(question, 5)
            .iter()
            .map(|h| snapshot.tools()[h.index].qualified_name.as_str())
            .collect();
        at1 += usize::from(
            ranked
                .first()
                .is_some_and(|r| any_of.iter().any(|a| a == r)),
        );
        if ranked.iter().any(|r| any_of.iter().any(|a| a == r)) {
            at5 += 1;
        } else {
            // Where the first right tool did land, when the misses are to be read.
            let rank = std::env::var_os("TETHER_BENCH_MISSES").and_then(|_| {
                snapshot
                    .search(question, snapshot.tools().len())
                    .iter()
                    .position(|h| any_of.contains(&snapshot.tools()[h.index].qualified_name))
                    .map(|p| p + 1)
            });
            match rank {
                Some(rank) => misses.push(format!("{question} → {ranked:?} (right at {rank})")),
                None => misses.push(format!("{question} → {ranked:?}")),
            }
        }
    }
    (at1, at5, misses)
}

fn median_spread(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
    )
}

/// MetaTool's ToolE (`benches/fixtures/toole.json`, MIT): 199 tools of the OpenAI plugin
/// store, as one server, and six user queries per tool, half for development and half held
/// out; recall@1, recall@5 and MRR per ranking, and the held-out gain over plain BM25.
fn toole(semantic: Option<&SemanticRanker>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/fixtures/toole.json");
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tools: Vec<Tool> = data["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            serde_json::from_value(
                serde_json::json!({"name": t["name"], "description": t["description"],
                "inputSchema": {"type": "object"}}),
            )
            .unwrap()
        })
        .collect();
    let servers = vec![ServerTools {
        server: "toole".into(),
        tools,
        always_load: false,
    }];
    println!(
        "\nMetaTool's ToolE (MIT): {} tools of the OpenAI plugin store, user queries each with one right tool",
        servers[0].tools.len()
    );
    println!(
        "{:<24} {:>4} | {:>9} {:>6} {:>6} | {:>9} {:>6} {:>6} | {:>9} {:>6} {:>6}",
        "part", "n", "plain r@1", "r@5", "MRR", "lex r@1", "r@5", "MRR", "+sem r@1", "r@5", "MRR"
    );
    for part in ["development", "held_out"] {
        let questions: Vec<(String, String)> = data[part]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                (
                    q["question"].as_str().unwrap().to_string(),
                    format!("toole__{}", q["tool"].as_str().unwrap()),
                )
            })
            .collect();
        let score = |snapshot: &Snapshot| {
            let (mut at1, mut at5, mut reciprocal) = (0usize, 0usize, 0.0f64);
            for (question, expected) in &questions {
                let hits = snapshot.search(question, 10);
                let rank = hits
                    .iter()
                    .position(|h| &snapshot.tools()[h.index].qualified_name == expected);
                at1 += usize::from(rank == Some(0));
                at5 += usize::from(rank.is_some_and(|r| r < 5));
                reciprocal += rank.map_or(0.0, |r| 1.0 / (r + 1) as f64);
            }
            let n = questions.len() as f64;
            (at1 as f64 / n, at5 as f64 / n, reciprocal / n)
        };
        let plain = score(&Snapshot::with_ranking(servers.clone(), Ranking::plain()));
        let lexical = score(&Snapshot::with_ranking(
            servers.clone(),
            Ranking::from_env(),
        ));
        let meaning = semantic.map(|r| {
            score(
                &Snapshot::with_ranking(servers.clone(), Ranking::from_env())
                    .with_semantic(Some(r.clone())),
            )
        });
        let cell = |(a, b, c): (f64, f64, f64)| format!("{a:>9.3} {b:>6.3} {c:>6.3}");
        println!(
            "{:<24} {:>4} | {} | {} | {}",
            part.replace('_', " "),
            questions.len(),
            cell(plain),
            cell(lexical),
            meaning.map_or_else(|| format!("{:>9} {:>6} {:>6}", "-", "-", "-"), cell)
        );
        if part == "held_out"
            && let Some(m) = meaning
        {
            println!(
                "  held out, recall@5 over plain BM25: {:+.1} points (lexical alone {:+.1})",
                (m.1 - plain.1) * 100.0,
                (lexical.1 - plain.1) * 100.0
            );
        }
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("toole") {
        toole(semantic_ranker().as_ref());
        return;
    }
    let quick = std::env::var_os("TETHER_BENCH_QUICK").is_some();
    let (tools, questions) = load();
    let shipped = snapshot(&tools, Ranking::from_env());
    println!(
        "tool search over the BFCL v4 fixture: {} tools, {} questions, each ranked among every \
         function with the definitions it was written against",
        tools.len(),
        questions.len()
    );
    let semantic = semantic_ranker();
    let started = Instant::now();
    if let Some(ranker) = &semantic {
        ranker.tool_vectors(shipped.tools());
    }
    let encoding = started.elapsed();
    if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("timing") {
        timing(&tools, &questions, &semantic, quick, encoding);
        return;
    }
    println!(
        "{:<18} {:>5} | {:>9} {:>6} {:>6} | {:>9} {:>6} {:>6} | {:>9} {:>6} {:>6}",
        "category",
        "n",
        "plain r@1",
        "r@5",
        "MRR",
        "lex r@1",
        "r@5",
        "MRR",
        "+sem r@1",
        "r@5",
        "MRR"
    );
    let only_phrasing = std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("phrasing");
    let categories = ["simple_python", "multiple", "parallel", "parallel_multiple"];
    for category in categories.into_iter().filter(|_| !only_phrasing) {
        let subset: Vec<&Question> = questions
            .iter()
            .filter(|q| q.category == category)
            .collect();
        let runs = [
            Some(score(&tools, Ranking::plain(), None, &subset, &[])),
            Some(score(&tools, Ranking::from_env(), None, &subset, &[])),
            semantic
                .as_ref()
                .map(|r| score(&tools, Ranking::from_env(), Some(r), &subset, &[])),
        ];
        let cells: Vec<String> = runs
            .iter()
            .map(|run| match run {
                Some(s) => format!(
                    "{:>9.3} {:>6.3} {:>6.3}",
                    s.at1 as f64 / s.n as f64,
                    s.at5 as f64 / s.n as f64,
                    s.reciprocal / s.n as f64
                ),
                None => format!("{:>9} {:>6} {:>6}", "-", "-", "-"),
            })
            .collect();
        println!(
            "{:<18} {:>5} | {}",
            category,
            subset.len(),
            cells.join(" | ")
        );
    }

    let (reference, phrased) = user_phrasing();
    let held_out = more_phrasing("user_phrasing_heldout.json");
    let mut mixed = reference.clone();
    mixed.push(ServerTools {
        server: "bfcl".into(),
        tools: tools.clone(),
        always_load: false,
    });
    // The development sets in the order they were written: file, ordinal, date written.
    const DEVELOPMENT: &[(&str, &str, &str)] = &[
        ("user_phrasing_dev2.json", "a second", "2026-11-27"),
        ("user_phrasing_dev3.json", "a third", "2026-11-27"),
        ("user_phrasing_dev4.json", "a fourth", "2026-11-27"),
        ("user_phrasing_dev5.json", "a fifth", "2026-11-27"),
        ("user_phrasing_dev6.json", "a sixth", "2026-11-28"),
        ("user_phrasing_dev7.json", "a seventh", "2026-11-28"),
        ("user_phrasing_dev8.json", "an eighth", "2026-11-28"),
        ("user_phrasing_dev9.json", "a ninth", "2026-11-28"),
        ("user_phrasing_dev10.json", "a tenth", "2026-11-28"),
        ("user_phrasing_dev11.json", "an eleventh", "2026-11-28"),
    ];
    let mut sets = vec![(
        format!(
            "questions phrased as users write them ({}), any fitting tool counts:",
            phrased.len()
        ),
        phrased,
    )];
    for (file, ordinal, written) in DEVELOPMENT {
        let questions = more_phrasing(file);
        sets.push((
            format!(
                "{ordinal} development set of {}, written {written} before it was first ranked:",
                questions.len()
            ),
            questions,
        ));
    }
    sets.push((
        format!(
            "held out: {} more, written before semantic ranking and never tuned on:",
            held_out.len()
        ),
        held_out,
    ));
    for (title, questions) in &sets {
        println!("\n{title}");
        println!(
            "{:<34} | {:>9} {:>6} | {:>9} {:>6} | {:>9} {:>6}",
            "catalogue", "plain r@1", "r@5", "lex r@1", "r@5", "+sem r@1", "r@5"
        );
        let n = questions.len() as f64;
        for (label, servers) in [
            (
                format!(
                    "reference servers ({} tools)",
                    reference.iter().map(|s| s.tools.len()).sum::<usize>()
                ),
                &reference,
            ),
            (
                format!(
                    "among BFCL ({} tools)",
                    mixed.iter().map(|s| s.tools.len()).sum::<usize>()
                ),
                &mixed,
            ),
        ] {
            let plain = Snapshot::with_ranking(servers.clone(), Ranking::plain());
            let ours = Snapshot::with_ranking(servers.clone(), Ranking::from_env());
            let (p1, p5, _) = score_any(&plain, questions);
            let (o1, o5, misses) = score_any(&ours, questions);
            let with_meaning = semantic.as_ref().map(|r| {
                score_any(
                    &Snapshot::with_ranking(servers.clone(), Ranking::from_env())
                        .with_semantic(Some(r.clone())),
                    questions,
                )
            });
            let meaning = match &with_meaning {
                Some((s1, s5, _)) => format!("{:>9.3} {:>6.3}", *s1 as f64 / n, *s5 as f64 / n),
                None => format!("{:>9} {:>6}", "-", "-"),
            };
            println!(
                "{label:<34} | {:>9.3} {:>6.3} | {:>9.3} {:>6.3} | {meaning}",
                p1 as f64 / n,
                p5 as f64 / n,
                o1 as f64 / n,
                o5 as f64 / n
            );
            // Never the held-out questions' misses: reading them is tuning on them.
            if std::env::var_os("TETHER_BENCH_MISSES").is_some() && !title.starts_with("held out") {
                misses.iter().for_each(|m| println!("  missed: {m}"));
                if let Some((_, _, misses)) = &with_meaning {
                    misses
                        .iter()
                        .for_each(|m| println!("  missed with meaning: {m}"));
                }
            }
        }
    }

    if let Some(ranker) = &semantic {
        beside_reference(&tools, &questions, &reference, ranker);
    }

    toole(semantic.as_ref());
    if only_phrasing {
        return;
    }

    println!(
        "\ntokens of tool definitions per request ({} tools):",
        tools.len()
    );
    for (mode, tokens) in tokens_per_mode(&shipped, 128_000) {
        println!("  {:<7} {tokens:>7} before any search", mode.as_str());
    }
    let loaded: Vec<usize> = questions
        .iter()
        .map(|q| {
            let selection = SearchTools::new(SelectionOptions {
                mode: SelectionMode::Search,
                ..SelectionOptions::default()
            });
            selection.start_turn(&shipped, &q.text);
            estimate_tokens(&selection.offer(&shipped))
        })
        .collect();
    let mut sorted = loaded.clone();
    sorted.sort();
    println!(
        "  search with the question's 5 best matches loaded: median {} (max {})",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );

    if let Some(n) = std::env::var("TETHER_BENCH_MISSES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        let shipped = shipped.with_semantic(semantic.clone());
        misses(&tools, &shipped, &questions, n, semantic.as_ref());
        return;
    }
    timing(&tools, &questions, &semantic, quick, encoding);
}

/// How long building the index and one query take, with words alone and with meaning
/// (`TETHER_BENCH_ONLY=timing` runs this part alone).
fn timing(
    tools: &[Tool],
    questions: &[Question],
    semantic: &Option<SemanticRanker>,
    quick: bool,
    encoding: std::time::Duration,
) {
    let shipped = snapshot(tools, Ranking::from_env());
    let rounds = if quick { 5 } else { 11 };
    let (mut builds, mut queries, mut indexes) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        std::hint::black_box(SearchIndex::build(shipped.tools(), Ranking::default()));
        indexes.push(started.elapsed());
        // Interleaved: one build, then one pass over the questions, each round.
        let started = Instant::now();
        let built = snapshot(tools, Ranking::default());
        builds.push(started.elapsed());
        let started = Instant::now();
        for question in questions.iter().take(200) {
            std::hint::black_box(built.search(&question.text, 5));
        }
        queries.push(started.elapsed() / 200);
    }
    let (build, build_min, build_max) = median_spread(builds);
    let (query, query_min, query_max) = median_spread(queries);
    let (index, index_min, index_max) = median_spread(indexes);
    println!("\nsearch index alone: median {index:.1} ms (min {index_min:.1}, max {index_max:.1})");
    println!(
        "\nindex build (names, definitions, BM25): median {build:.1} ms (min {build_min:.1}, max {build_max:.1}) over {rounds} rounds"
    );
    println!(
        "one query over {} tools: median {query:.3} ms (min {query_min:.3}, max {query_max:.3})",
        tools.len()
    );
    if let Some(ranker) = &semantic {
        let with_meaning = snapshot_with(tools, Ranking::default(), Some(ranker), &[]);
        with_meaning.search("warm up", 5);
        let mut samples = Vec::new();
        for _ in 0..rounds {
            let started = Instant::now();
            for question in questions.iter().take(50) {
                std::hint::black_box(with_meaning.search(&question.text, 5));
            }
            samples.push(started.elapsed() / 50);
        }
        let (q, q_min, q_max) = median_spread(samples);
        println!(
            "one query with semantic ranking (encoding the query, then fusing): median {q:.3} ms (min {q_min:.3}, max {q_max:.3})"
        );
        // The encoding alone, on the same questions: what the fusion adds is the difference.
        if let Ok(encoder) = SentenceEncoder::load(&test_support::encoder_dir()) {
            let mut samples = Vec::new();
            for _ in 0..rounds {
                let started = Instant::now();
                for question in questions.iter().take(50) {
                    std::hint::black_box(encoder.embed(&question.text));
                }
                samples.push(started.elapsed() / 50);
            }
            let mut tokens: Vec<usize> = questions
                .iter()
                .take(50)
                .map(|q| encoder.tokenize(&q.text).len())
                .collect();
            tokens.sort_unstable();
            let (e, e_min, e_max) = median_spread(samples);
            println!(
                "  of which encoding the query: median {e:.3} ms (min {e_min:.3}, max {e_max:.3}), {} tokens median, {} at most",
                tokens[tokens.len() / 2],
                tokens[tokens.len() - 1]
            );
        }
        println!(
            "encoding the {} tools for semantic ranking: {:.1} s on {} threads ({})",
            tools.len(),
            encoding.as_secs_f64(),
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            if std::env::var_os("TETHER_BENCH_COLD").is_some() {
                "cold: every tool encoded"
            } else {
                "vectors cached by an earlier run are reused; TETHER_BENCH_COLD=1 for the cold figure"
            }
        );
    }
    println!(
        "machine load while measuring: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

/// `TETHER_BENCH_MISSES=N` prints N questions whose expected tool is not in the top 5.
fn misses(
    tools: &[Tool],
    shared: &Snapshot,
    questions: &[Question],
    n: usize,
    semantic: Option<&SemanticRanker>,
) {
    let mut shown = 0;
    for q in questions
        .iter()
        .filter(|q| q.category == "simple_python" || q.category == "multiple")
    {
        let own = own_catalogue(tools, q, Ranking::from_env(), semantic, &[]);
        let snapshot = own.as_ref().unwrap_or(shared);
        let ranked: Vec<String> = snapshot
            .search(&q.text, 5)
            .iter()
            .map(|h| snapshot.tools()[h.index].tool.name.clone())
            .collect();
        if q.expected.iter().all(|e| ranked.contains(e)) {
            continue;
        }
        let want = snapshot
            .tools()
            .iter()
            .find(|t| t.tool.name == q.expected[0])
            .unwrap();
        println!(
            "Q: {}\n  want {} — {}\n  got {:?}",
            q.text,
            want.tool.name,
            want.tool.description.as_deref().unwrap_or(""),
            ranked
        );
        shown += 1;
        if shown >= n {
            break;
        }
    }
}
