//! Embedded-model benchmark, run with `cargo bench -p tether --bench local` (or
//! scripts/bench.sh): tool-call accuracy of the default model over a fixed set of prompts,
//! with and without grammar-constrained decoding, against the built-in tools and
//! server-everything's tools offered together (20 tools), plus prompt and generation speed.

// Benchmarks and tests report to their runner: the binary's terminal sink is not theirs.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

mod busy;
mod natural;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use test_support::npm_bin;

use tether_catalog::{
    SearchTools, SelectionMode, SelectionOptions, SemanticRanker, TextEncoder, ToolCatalog,
    ToolSelection,
};
use tether_llm::{ChatRequest, ToolChoice, complete};
use tether_local::{LocalOptions, LocalProvider};
use tether_mcp::{ServerConfig, ServerRegistry};
use tether_models as provision;
use tether_protocol::chat::{Message, ToolDefinition};

/// (prompt, expected qualified tool, expected arguments — only these keys are checked)
fn cases() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "What is 10 + 20? Use the add tool.",
            "builtin__add",
            json!({"a": 10, "b": 20}),
        ),
        ("Add 7 and 35.", "builtin__add", json!({"a": 7, "b": 35})),
        (
            "What is 15 plus 27?",
            "builtin__add",
            json!({"a": 15, "b": 27}),
        ),
        (
            "Subtract 4 from 19.",
            "builtin__subtract",
            json!({"a": 19, "b": 4}),
        ),
        (
            "What is 9 minus 2?",
            "builtin__subtract",
            json!({"a": 9, "b": 2}),
        ),
        (
            "What is 6 times 7?",
            "builtin__multiply",
            json!({"a": 6, "b": 7}),
        ),
        (
            "Multiply 12 by 3.",
            "builtin__multiply",
            json!({"a": 12, "b": 3}),
        ),
        (
            "Divide 100 by 4.",
            "builtin__divide",
            json!({"a": 100, "b": 4}),
        ),
        ("What time is it now?", "builtin__current_time", json!({})),
        ("What is today's date?", "builtin__current_time", json!({})),
        (
            "Read the file notes.txt.",
            "builtin__read_file",
            json!({"path": "notes.txt"}),
        ),
        (
            "Show me what is in README.md.",
            "builtin__read_file",
            json!({"path": "README.md"}),
        ),
        (
            "List the files in the current directory.",
            "builtin__list_files",
            json!({}),
        ),
        (
            "Echo the message hello world.",
            "everything__echo",
            json!({"message": "hello world"}),
        ),
        (
            "Please echo back: good morning",
            "everything__echo",
            json!({"message": "good morning"}),
        ),
        (
            "Use get-sum to add 2 and 3.",
            "everything__get-sum",
            json!({"a": 2, "b": 3}),
        ),
        (
            "Get the sum of 5 and 8 with get-sum.",
            "everything__get-sum",
            json!({"a": 5, "b": 8}),
        ),
        (
            "Show me the tiny image.",
            "everything__get-tiny-image",
            json!({}),
        ),
        (
            "Print the environment variables.",
            "everything__get-env",
            json!({}),
        ),
        (
            "Start a long running operation.",
            "everything__trigger-long-running-operation",
            json!({}),
        ),
        (
            "Give me some resource links.",
            "everything__get-resource-links",
            json!({}),
        ),
        (
            "Get the structured content for Chicago.",
            "everything__get-structured-content",
            json!({"location": "Chicago"}),
        ),
    ]
}

/// all-MiniLM-L6-v2 as `tether run` gives a remote model's catalogue, to measure what it does
/// to the embedded model's pre-selection (which stays lexical in the product: see the result).
struct MiniLm(tether_encoder::SentenceEncoder);

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

async fn semantic_ranker() -> SemanticRanker {
    let dir = provision::ensure_encoder_model(&|_, _, _| {})
        .await
        .unwrap();
    let encoder = tether_encoder::SentenceEncoder::load(&dir).unwrap();
    SemanticRanker::new(Arc::new(MiniLm(encoder)), Some(dir))
}

/// The tools `--tools auto` pre-selects for `prompt` when the embedded model is used (up to
/// three; with `margin`, only those ranked within it of the best, as `tether run` does),
/// best first.
fn preselected(
    snapshot: &tether_catalog::Snapshot,
    prompt: &str,
    margin: Option<f64>,
) -> Vec<tether_protocol::chat::ToolDefinition> {
    let selection = SearchTools::new(SelectionOptions {
        mode: SelectionMode::Search,
        search_tool: false,
        preload: 3,
        preload_margin: margin,
        keep_loaded: false,
        ..SelectionOptions::default()
    });
    selection.start_turn(snapshot, prompt);
    selection.offer(snapshot)
}

/// The pre-selection margin: the product's, or `TETHER_BENCH_MARGIN` to measure another.
fn margin() -> f64 {
    std::env::var("TETHER_BENCH_MARGIN")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(tether_catalog::SMALL_MODEL_PRELOAD_MARGIN)
}

fn arguments_match(expected: &Value, actual: &Value) -> bool {
    expected
        .as_object()
        .unwrap()
        .iter()
        .all(|(key, want)| match (want, actual.get(key)) {
            (Value::Number(w), Some(Value::Number(a))) => w.as_f64() == a.as_f64(),
            (Value::String(w), Some(Value::String(a))) => w.trim().eq_ignore_ascii_case(a.trim()),
            (w, Some(a)) => w == a,
            (_, None) => false,
        })
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let path = provision::ensure_default_model(&|_, _, _| {}).await.unwrap();
        let servers = vec![
            ServerConfig::stdio("builtin", env!("CARGO_BIN_EXE_tether"), vec!["builtin-server".into()]),
            ServerConfig::stdio("everything", npm_bin("mcp-server-everything").display().to_string(), vec!["stdio".into()]),
        ];
        let registry = ServerRegistry::start(servers, std::sync::Arc::new(tether_mcp::HeadlessHost)).await;
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("bfcl") {
            registry.shutdown().await;
            bfcl(&path).await;
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("natural") {
            registry.shutdown().await;
            natural::natural_questions();
            natural::natural_twenty();
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("naturaldev") {
            registry.shutdown().await;
            natural::natural_dev();
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("naturaldev2") {
            registry.shutdown().await;
            natural::natural_dev2();
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("naturaldev3") {
            registry.shutdown().await;
            natural::natural_dev3();
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("twenty") {
            registry.shutdown().await;
            natural::natural_twenty();
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("speed") {
            registry.shutdown().await;
            speed(&path).await;
            call_speed(&path).await;
            return;
        }
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("busy") {
            registry.shutdown().await;
            busy::busy_machine();
            return;
        }
        // The prompts read notes.txt and README.md: run where they exist, as a user would (the
        // embedded model may only name files that do).
        let workdir = std::env::temp_dir().join(format!("tether-bench-local-{}", std::process::id()));
        std::fs::create_dir_all(&workdir).unwrap();
        std::fs::write(workdir.join("notes.txt"), "The meeting is on Tuesday.").unwrap();
        std::fs::write(workdir.join("README.md"), "# A project").unwrap();
        std::env::set_current_dir(&workdir).unwrap();
        let (catalog, _) = ToolCatalog::load(&registry).await;
        let lexical = catalog.snapshot();
        catalog.rank_semantically(semantic_ranker().await);
        let semantic = catalog.snapshot();
        let tools = semantic.definitions().to_vec();
        println!("tool-call accuracy of SmolLM2-135M-Instruct Q4_1, {} prompts, {} tools", cases().len(), tools.len());
        // Pre-selection is what `--tools search|auto` does for the embedded model: the three
        // best matches for the question are offered, and the grammar is built over them.
        let margin = margin();
        for (grammar, preselect, meaning) in [(true, true, true), (true, true, false), (true, false, false), (false, false, false)] {
            if !preselect && std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("preselect") {
                break;
            }
            let snapshot = if meaning { &semantic } else { &lexical };
            let provider = LocalProvider::load(&path, "local".into(), LocalOptions { grammar, ..LocalOptions::default() }).unwrap();
            let (mut names, mut both, mut offered_right, mut first_right) = (0, 0, 0, 0);
            let started = Instant::now();
            for (prompt, tool, arguments) in cases() {
                let offered = if preselect {
                    preselected(snapshot, prompt, if meaning { Some(margin) } else { None })
                } else {
                    tools.clone()
                };
                offered_right += usize::from(offered.iter().any(|d| d.name == tool));
                first_right += usize::from(offered.first().is_some_and(|d| d.name == tool));
                let request = ChatRequest {
                    messages: vec![Message::system("You are a helpful assistant with tools."), Message::user(prompt)],
                    tools: offered,
                    tool_choice: ToolChoice::Auto,
                    max_tokens: None,
                    temperature: None,
                };
                let response = complete(&provider, &request).await.unwrap();
                let call = response.tool_calls.first();
                let name_ok = call.is_some_and(|c| c.name == tool);
                let args_ok = name_ok && call.is_some_and(|c| arguments_match(&arguments, &serde_json::from_str(&c.arguments).unwrap_or(Value::Null)));
                names += usize::from(name_ok);
                both += usize::from(args_ok);
                if std::env::var_os("TETHER_BENCH_VERBOSE").is_some() {
                    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
                    println!("    {prompt:?}: offered {offered:?}, called {:?}", call.map(|c| (&c.name, &c.arguments)));
                }
            }
            let n = cases().len();
            println!(
                "  grammar {:3}, {}: correct tool {names}/{n} ({:.0}%), correct tool and arguments {both}/{n} ({:.0}%), right tool offered {offered_right}/{n} (first {first_right}/{n}), {:.1}s per prompt",
                if grammar { "on" } else { "off" },
                match (preselect, meaning) {
                    (true, true) => format!("up to 3 pre-selected tools within {margin} of the best, words and meaning (what tether run does)"),
                    (true, false) => "3 pre-selected tools (words alone)".to_string(),
                    _ => "all tools offered".to_string(),
                },
                names as f64 * 100.0 / n as f64,
                both as f64 * 100.0 / n as f64,
                started.elapsed().as_secs_f64() / n as f64
            );
        }
        registry.shutdown().await;
        if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("preselect") {
            return;
        }
        natural::natural_questions();
        natural::natural_twenty();
        speed(&path).await;
        call_speed(&path).await;
        busy::busy_machine();
    });
}

/// The first 100 BFCL simple_python questions, each with its own function among 100
/// distractors from the BFCL fixture: every tool offered, or the three pre-selected for the
/// question as `--tools auto` does for the embedded model. Scored on the tool name, and on the
/// name plus the required arguments' first accepted values.
async fn bfcl(path: &std::path::Path) {
    let dir = test_support::workspace_root().join("peers/bfcl");
    let tools: Vec<tether_protocol::Tool> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("tools.json")).expect("run scripts/install-peers.sh"),
    )
    .unwrap();
    let questions: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("questions.json")).unwrap())
            .unwrap();
    let questions: Vec<&Value> = questions
        .iter()
        .filter(|q| q["category"] == "simple_python")
        .take(100)
        .collect();
    let provider = LocalProvider::load(path, "local".into(), LocalOptions::default()).unwrap();
    println!(
        "BFCL simple_python, first {} questions, each with 100 distractor tools",
        questions.len()
    );
    // Without pre-selection every question's prompt holds 101 tools (about 16 s of prompt
    // processing each on two cores), so that side runs on the first 25 questions only.
    let ranker = semantic_ranker().await;
    let margin = margin();
    for (preselect, count) in [(true, questions.len()), (false, 25.min(questions.len()))] {
        let (mut names, mut both, mut offered_right, mut first_right, mut failed) = (0, 0, 0, 0, 0);
        let started = Instant::now();
        for (i, question) in questions.iter().take(count).enumerate() {
            let wanted = question["expected"][0].as_str().unwrap();
            // The definition the question was written against (BFCL reuses names).
            let own: tether_protocol::Tool = question["functions"]
                .as_array()
                .and_then(|f| f.iter().find(|f| f["name"] == wanted))
                .map(|f| serde_json::from_value(f.clone()).unwrap())
                .unwrap_or_else(|| tools.iter().find(|t| t.name == wanted).unwrap().clone());
            // Distractors: a fixed stride through the catalogue, never the question's own.
            let mut offered: Vec<tether_protocol::Tool> = (0..)
                .map(|k| &tools[(i * 131 + k * 17) % tools.len()])
                .filter(|t| t.name != wanted)
                .take(100)
                .cloned()
                .collect();
            offered.insert((i * 7) % 100, own.clone());
            let snapshot = tether_catalog::Snapshot::new(vec![tether_catalog::ServerTools {
                server: "bfcl".into(),
                tools: offered,
                always_load: false,
            }])
            .with_semantic(Some(ranker.clone()));
            let text = question["question"].as_str().unwrap();
            let definitions = if preselect {
                preselected(&snapshot, text, Some(margin))
            } else {
                snapshot.definitions().to_vec()
            };
            let qualified = snapshot
                .tools()
                .iter()
                .find(|t| t.tool.name == wanted)
                .unwrap()
                .qualified_name
                .clone();
            offered_right += usize::from(definitions.iter().any(|d| d.name == qualified));
            first_right += usize::from(definitions.first().is_some_and(|d| d.name == qualified));
            let request = ChatRequest {
                messages: vec![
                    Message::system("You are a helpful assistant with tools."),
                    Message::user(text),
                ],
                tools: definitions,
                tool_choice: ToolChoice::Auto,
                max_tokens: None,
                temperature: None,
            };
            let Ok(response) = complete(&provider, &request).await else {
                failed += 1;
                continue;
            };
            let call = response.tool_calls.first();
            let name_ok = call.is_some_and(|c| c.name == qualified);
            let required: Vec<&str> = own.input_schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let expected: serde_json::Map<String, Value> = question["arguments"]
                .as_object()
                .map(|a| {
                    a.iter()
                        .filter(|(k, _)| required.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            let args_ok = name_ok
                && call.is_some_and(|c| {
                    arguments_match(
                        &Value::Object(expected.clone()),
                        &serde_json::from_str(&c.arguments).unwrap_or(Value::Null),
                    )
                });
            names += usize::from(name_ok);
            both += usize::from(args_ok);
        }
        let n = count;
        println!(
            "  {}: correct tool {names}/{n}, correct tool and required arguments {both}/{n}, right tool offered {offered_right}/{n} (first {first_right}/{n}), model errors (e.g. context exceeded) {failed}, {:.1}s per question",
            if preselect {
                format!(
                    "up to 3 pre-selected tools within {margin} of the best (what tether run does)"
                )
            } else {
                "all 101 tools offered".to_string()
            },
            started.elapsed().as_secs_f64() / n as f64
        );
    }
}

/// Prompt and generation tokens/s of the embedded provider, next to llama.cpp's own
/// `llama-bench` on the same file and threads when `LLAMA_BENCH` points at it.
async fn speed(path: &std::path::Path) {
    // A fixed count on both sides (the product chooses per request by the machine's load).
    let threads = tether_local::default_threads();
    // Every request evaluated whole, as llama.cpp's tools run each one.
    let options = LocalOptions {
        threads,
        keep_context: false,
        ..LocalOptions::default()
    };
    let provider = LocalProvider::load(path, "local".into(), options).unwrap();
    let prompt = "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(38);
    let request = |max_tokens: u32| ChatRequest {
        messages: vec![Message::user(format!(
            "{prompt}\nWrite a long story about the fox."
        ))],
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        max_tokens: Some(max_tokens),
        temperature: None,
    };
    // Generation speed from a short prompt, as llama-bench's tg128 starts from an empty
    // context: the extra time of up to 128 more tokens over a one-token run.
    let short = |max_tokens: u32| ChatRequest {
        messages: vec![Message::user("Write a long story about a fox.")],
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        max_tokens: Some(max_tokens),
        temperature: None,
    };
    let mut base = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        complete(&provider, &short(1)).await.unwrap();
        base = base.min(started.elapsed().as_secs_f64());
    }
    let bench = std::env::var_os("LLAMA_BENCH");
    // Rounds interleaved with llama-bench's, so both see the same machine; best of rounds.
    let (mut prompt_rates, mut gen_rates, mut pp_rates, mut tg_rates) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut prompt_tokens = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let response = complete(&provider, &request(1)).await.unwrap();
        prompt_tokens = response.usage.input_tokens;
        prompt_rates.push(prompt_tokens as f64 / started.elapsed().as_secs_f64());
        let started = Instant::now();
        let response = complete(&provider, &short(129)).await.unwrap();
        let extra = started.elapsed().as_secs_f64() - base;
        let generated = response.usage.output_tokens.saturating_sub(1);
        gen_rates.push(generated as f64 / extra.max(1e-6));
        if let Some(bench) = &bench
            && let Some((pp, tg)) = llama_bench(bench, path, threads, prompt_tokens)
        {
            pp_rates.push(pp);
            tg_rates.push(tg);
        }
    }
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    let spread = |rates: &[f64]| {
        let mut sorted = rates.to_vec();
        sorted.sort_by(f64::total_cmp);
        format!(
            "median {:.1}, {:.1}–{:.1}",
            sorted[sorted.len() / 2],
            sorted[0],
            sorted[sorted.len() - 1]
        )
    };
    println!("speed, {threads} threads, best of 5 interleaved rounds (median, min–max):");
    println!(
        "  tether       prompt {:7.1} tok/s ({}; {prompt_tokens} tokens), generation {:7.1} tok/s ({})",
        best(&prompt_rates),
        spread(&prompt_rates),
        best(&gen_rates),
        spread(&gen_rates)
    );
    if bench.is_none() {
        println!(
            "  (set LLAMA_BENCH to llama.cpp's llama-bench for the ratio; scripts/bench.sh builds it)"
        );
        return;
    }
    if pp_rates.is_empty() {
        println!("  llama-bench gave no result");
        return;
    }
    println!(
        "  llama-bench  prompt {:7.1} tok/s ({}), generation {:7.1} tok/s ({})",
        best(&pp_rates),
        spread(&pp_rates),
        best(&tg_rates),
        spread(&tg_rates)
    );
    println!(
        "  ratio tether/llama-bench (best of rounds): prompt {:.2}x, generation {:.2}x",
        best(&prompt_rates) / best(&pp_rates),
        best(&gen_rates) / best(&tg_rates)
    );
}

/// Grammar-constrained calls, Tether against llama.cpp doing the same work: its
/// `llama-completion` (built beside llama-bench by scripts/bench.sh) given the prompt and the
/// GBNF grammar Tether gives the model for the README's first question over three tools,
/// greedy, on the same threads, for as many tokens, rounds interleaved. Both times are the call's prompt, decoding
/// and sampling; llama.cpp's excludes loading the model and creating its context, Tether's
/// includes creating the context.
async fn call_speed(path: &std::path::Path) {
    let Some(bench) = std::env::var_os("LLAMA_BENCH") else {
        return;
    };
    let completion = std::path::Path::new(&bench).with_file_name("llama-completion");
    if !completion.exists() {
        println!(
            "  (llama-completion is not built beside llama-bench: scripts/bench.sh builds it)"
        );
        return;
    }
    let threads = tether_local::default_threads();
    // Every request evaluated whole, as llama.cpp's tools run each one.
    let options = LocalOptions {
        threads,
        keep_context: false,
        ..LocalOptions::default()
    };
    let provider = LocalProvider::load(path, "local".into(), options).unwrap();
    let number = json!({"type": "number"});
    let tool = |name: &str, description: &str| ToolDefinition {
        name: name.into(),
        description: description.into(),
        parameters: json!({"type": "object", "properties": {"a": number, "b": number},
            "required": ["a", "b"]}),
    };
    let request = ChatRequest {
        messages: vec![Message::user("What is 10 + 20? Use the add tool.")],
        tools: vec![
            tool("builtin__add", "Add two numbers."),
            tool("builtin__multiply", "Multiply two numbers."),
            tool("builtin__divide", "Divide a by b."),
        ],
        tool_choice: ToolChoice::Required,
        max_tokens: None,
        temperature: None,
    };
    let (prompt, grammar) = provider.prompt_and_grammar(&request).unwrap();
    let dir = std::env::temp_dir().join(format!("tether-bench-call-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("prompt.txt"), &prompt).unwrap();
    std::fs::write(dir.join("call.gbnf"), grammar.expect("a call's grammar")).unwrap();
    let (mut ours, mut theirs, mut tokens) = (Vec::new(), Vec::new(), (0, 0));
    for _ in 0..5 {
        let started = Instant::now();
        let response = complete(&provider, &request).await.unwrap();
        ours.push(started.elapsed().as_secs_f64() * 1000.0);
        tokens.0 = response.usage.output_tokens;
        let output = std::process::Command::new(&completion)
            .args([
                "-m",
                &path.display().to_string(),
                "-t",
                &threads.to_string(),
            ])
            .arg("-f")
            .arg(dir.join("prompt.txt"))
            .arg("--grammar-file")
            .arg(dir.join("call.gbnf"))
            // As many tokens as Tether generated: it stops where the call is complete JSON,
            // llama.cpp only at the grammar's end or the end of the turn.
            .args(["-n", &tokens.0.to_string()])
            .args(["--temp", "0", "-no-cnv", "--no-warmup", "-c", "2048"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&output.stderr);
        // "prompt eval time = 157.20 ms / 23 tokens", "eval time = 673.86 ms / 38 runs",
        // "sampling time = 195.81 ms".
        let field = |label: &str| {
            log.lines()
                .find(|l| {
                    l.split_once(": ").is_some_and(|(_, rest)| {
                        rest.trim_start().starts_with(&format!("{label} ="))
                    })
                })
                .and_then(|l| l.split('=').nth(1))
                .map(|rest| rest.trim().to_string())
        };
        let ms = |label: &str| {
            field(label)
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let runs = field("eval time")
            .and_then(|v| {
                v.split('/')
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        tokens.1 = runs;
        theirs.push(ms("prompt eval time") + ms("eval time") + ms("sampling time"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        (
            sorted[sorted.len() / 2],
            sorted[0],
            sorted[sorted.len() - 1],
        )
    };
    let (a, a_lo, a_hi) = median(&ours);
    let (b, b_lo, b_hi) = median(&theirs);
    println!(
        "grammar-constrained call (the README's question, 3 tools, {threads} threads, 5 interleaved rounds, median (min–max)):"
    );
    println!(
        "  tether            {a:6.0} ms ({a_lo:.0}–{a_hi:.0}), {} tokens generated",
        tokens.0
    );
    println!(
        "  llama-completion  {b:6.0} ms ({b_lo:.0}–{b_hi:.0}), {} tokens generated (prompt, decoding and sampling)",
        tokens.1
    );
    println!("  ratio of speed tether/llama.cpp: {:.2}x", b / a);
}

/// One llama-bench run (`-r 1`): prompt and generation tokens/s.
fn llama_bench(
    bench: &std::ffi::OsStr,
    path: &std::path::Path,
    threads: i32,
    prompt_tokens: u64,
) -> Option<(f64, f64)> {
    let output = std::process::Command::new(bench)
        .args([
            "-m",
            &path.display().to_string(),
            "-t",
            &threads.to_string(),
            "-p",
            &prompt_tokens.to_string(),
            "-n",
            "128",
            "-r",
            "1",
            "-o",
            "json",
        ])
        .output()
        .ok()?;
    let results: Value = serde_json::from_slice(&output.stdout).ok()?;
    let rate = |generation: bool| {
        results
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| (r["n_gen"].as_u64().unwrap_or(0) > 0) == generation)
            .and_then(|r| r["avg_ts"].as_f64())
    };
    Some((rate(false)?, rate(true)?))
}
