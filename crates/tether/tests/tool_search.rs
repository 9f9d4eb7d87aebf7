//! Tool selection end to end: the real binary, the BFCL fixture server (1,853 tools) or
//! server-everything, and the scripted model in the OpenAI, Anthropic and Ollama wire
//! formats. Each test asserts what every request carried: which tool definitions, how many
//! tokens of them, and what the model was told after a search or a bad meta-tool call.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Stdio};

use serde_json::Value;
use test_support::model::{Recorded, Reply, ScriptedModel, Wire};
use test_support::{bfcl_stdio, everything_stdio, misbehaving_stdio, scratch_dir};

const WIRES: [Wire; 3] = [Wire::OpenAi, Wire::Anthropic, Wire::Ollama];

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn model_flag(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenAi => "openai:scripted-model",
        Wire::Anthropic => "anthropic:scripted-model",
        Wire::Ollama => "ollama:scripted-model",
    }
}

fn tether_run(model: &ScriptedModel, wire: Wire, server: &str, args: &[&str]) -> Run {
    // One directory per run: tests run in parallel and a scratch dir is emptied when made.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = scratch_dir("tool_search", &format!("run-{n}"));
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "run",
            "--model",
            model_flag(wire),
            "--base-url",
            &model.base_url(),
            "--approve",
            "auto",
            "--stdio",
            server,
        ])
        .args(args)
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .env_remove("TETHER_MODEL")
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("OPENAI_API_KEY", "test-key")
        .stdin(Stdio::null())
        .output()
        .expect("tether runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `tether chat` over a pipe with the scripted OpenAI-format model: `input` is typed line by
/// line, then stdin closes and the chat ends.
fn chat(model: &ScriptedModel, name: &str, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let dir = scratch_dir("tool_search", name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "chat",
            "--model",
            "openai:scripted-model",
            "--base-url",
            &model.base_url(),
        ])
        .args(args)
        .current_dir(&dir)
        .env("OPENAI_API_KEY", "test-key")
        .env("TETHER_DATA_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The tool definitions of a request as (name, whole definition), whatever the wire format.
fn tools(request: &Recorded) -> Vec<(String, Value)> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    let name = t["name"]
                        .as_str()
                        .or(t["function"]["name"].as_str())
                        .expect("a tool name")
                        .to_string();
                    (name, t.clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn names(request: &Recorded) -> Vec<String> {
    tools(request).into_iter().map(|(name, _)| name).collect()
}

/// Tokens of a request's tool definitions, estimated as the host does (4 characters each).
fn tool_tokens(request: &Recorded) -> usize {
    tools(request)
        .iter()
        .map(|(_, t)| t.to_string().len().div_ceil(4))
        .sum()
}

#[test]
fn search_mode_over_1853_tools_sends_under_2000_tokens_and_calls_what_it_found() {
    for wire in WIRES {
        let model = ScriptedModel::start(
            wire,
            vec![
                Reply::call(
                    "call_1",
                    "search_tools",
                    r#"{"query": "probability of a binomial distribution"}"#,
                ),
                Reply::call(
                    "call_2",
                    "search_tools",
                    r#"{"query": "select:bfcl__prob_dist_binomial"}"#,
                ),
                Reply::call(
                    "call_3",
                    "bfcl__prob_dist_binomial",
                    r#"{"trials": 10, "successes": 5}"#,
                ),
                Reply::text("About 24.6%."),
            ],
        );
        let run = tether_run(
            &model,
            wire,
            &bfcl_stdio(),
            &["--json", "What are the odds of 5 heads in 10 tosses?"],
        );
        assert_eq!(run.code, 0, "{wire:?}: {}\n{}", run.stderr, run.stdout);
        let requests = model.requests();
        assert_eq!(requests.len(), 4, "{wire:?}");
        let first = names(&requests[0]);
        assert!(
            !first.is_empty(),
            "{wire:?}: {}\n{:#}",
            run.stderr,
            requests[0].body
        );
        assert_eq!(first[0], "search_tools", "{wire:?}: {first:?}");
        assert!(
            first.len() <= 6,
            "the search tool and at most 5 pre-selected tools: {first:?}"
        );
        for request in &requests {
            assert!(
                tool_tokens(request) < 2_000,
                "{wire:?}: {} tokens of tools",
                tool_tokens(request)
            );
        }
        let second = names(&requests[1]);
        assert_eq!(
            second[..first.len()],
            first[..],
            "{wire:?}: loaded tools are appended, the prefix stays"
        );
        assert!(
            second.contains(&"bfcl__prob_dist_binomial".to_string()),
            "{wire:?}: the search loaded the tool: {second:?}"
        );
        let told = requests[1].body.to_string();
        assert!(
            told.contains("bfcl__prob_dist_binomial: Compute the probability"),
            "{wire:?}: the search result names the tool: {told}"
        );
        let selected = requests[2].body.to_string();
        assert!(
            selected.contains(r"Loaded 1 tool; call it directly:\n- bfcl__prob_dist_binomial"),
            "{wire:?}: select: answers with exactly the named tool: {selected}"
        );
        let third = requests[3].body.to_string();
        assert!(
            third.contains(r#"\"called\": \"prob_dist.binomial\""#),
            "{wire:?}: the call reached the server's prob_dist.binomial: {third}"
        );
        let events = run.events();
        let loaded: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "tools_loaded")
            .collect();
        assert!(
            loaded.iter().any(|e| e["reason"] == "preselected"),
            "{}",
            run.stdout
        );
        assert!(
            loaded.iter().any(|e| e["reason"] == "search"
                && e["query"] == "probability of a binomial distribution"),
            "{}",
            run.stdout
        );
        // Semantic ranking may pre-select the tool from the question itself; either way it
        // was loaded before the model called it.
        assert!(
            loaded.iter().any(|e| e["names"]
                .as_array()
                .unwrap()
                .contains(&Value::from("bfcl__prob_dist_binomial"))),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn auto_is_the_default_and_switches_to_search_for_a_large_catalogue() {
    for wire in WIRES {
        let model = ScriptedModel::start(
            wire,
            vec![
                Reply::call("call_1", "bfcl__math_factorial", r#"{"number": 5}"#),
                Reply::text("120"),
            ],
        );
        let run = tether_run(
            &model,
            wire,
            &bfcl_stdio(),
            &["Compute 5! with math.factorial."],
        );
        assert_eq!(run.code, 0, "{wire:?}: {}", run.stderr);
        let requests = model.requests();
        let first = names(&requests[0]);
        assert_eq!(first[0], "search_tools", "{wire:?}: {first:?}");
        assert_eq!(
            first[1], "bfcl__math_factorial",
            "{wire:?}: a tool named in the question is pre-loaded first: {first:?}"
        );
        assert!(tool_tokens(&requests[0]) < 2_000);
        assert!(
            requests[1]
                .body
                .to_string()
                .contains(r#"\"called\": \"math.factorial\""#),
            "{wire:?}: {:#}",
            requests[1].body
        );
    }

    // A small catalogue is sent whole.
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("hi")]);
    let run = tether_run(&model, Wire::OpenAi, &everything_stdio(), &["hello"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let offered = names(&model.requests()[0]);
    assert!(
        offered.len() > 10 && !offered.contains(&"search_tools".to_string()),
        "{offered:?}"
    );
}

#[test]
fn all_mode_sends_every_tool_in_every_wire_format() {
    for wire in WIRES {
        let model = ScriptedModel::start(wire, vec![Reply::text("ok")]);
        let run = tether_run(&model, wire, &everything_stdio(), &["--tools", "all", "hi"]);
        assert_eq!(run.code, 0, "{wire:?}: {}", run.stderr);
        let offered = names(&model.requests()[0]);
        assert!(
            offered.contains(&"everything__get-sum".to_string()) && offered.len() > 10,
            "{wire:?}: {offered:?}"
        );
    }
}

#[test]
fn meta_mode_sends_one_tool_and_a_bad_call_gets_the_schema_back() {
    for wire in WIRES {
        let model = ScriptedModel::start(
            wire,
            vec![
                Reply::call(
                    "call_1",
                    "mcp_query",
                    r#"{"server": "everything", "tool": "get-sum", "params": {"a": "two"}}"#,
                ),
                Reply::call(
                    "call_2",
                    "mcp_query",
                    r#"{"server": "everything", "tool": "get-sum", "params": {"a": 2, "b": 3}}"#,
                ),
                Reply::text("5"),
            ],
        );
        let run = tether_run(
            &model,
            wire,
            &everything_stdio(),
            &["--tools", "meta", "What is 2+3?"],
        );
        assert_eq!(run.code, 0, "{wire:?}: {}", run.stderr);
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        for request in &requests {
            assert_eq!(names(request), ["mcp_query"], "{wire:?}");
        }
        let (_, definition) = &tools(&requests[0])[0];
        let description = definition.to_string();
        assert!(
            description.contains("get-sum") && description.contains("everything"),
            "{wire:?}: the description lists servers and tools: {description}"
        );
        let after_bad = requests[1].body.to_string();
        assert!(
            after_bad.contains("params do not match the input schema")
                && after_bad.contains(r#"\"required\":[\"a\",\"b\"]"#),
            "{wire:?}: the error carries the tool's schema: {after_bad}"
        );
        let after_good = requests[2].body.to_string();
        assert!(
            after_good.contains("The sum of 2 and 3 is 5"),
            "{wire:?}: the second call reached get-sum: {after_good}"
        );
        assert!(
            run.stderr.contains("→ everything__get-sum"),
            "the real tool is shown: {}",
            run.stderr
        );
    }
}

#[test]
fn meta_mode_explains_an_unknown_server_and_tool() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::calls(&[
                (
                    "call_1",
                    "mcp_query",
                    r#"{"server": "everythin", "tool": "get-sum"}"#,
                ),
                (
                    "call_2",
                    "mcp_query",
                    r#"{"server": "everything", "tool": "get_summ"}"#,
                ),
            ]),
            Reply::text("sorry"),
        ],
    );
    let run = tether_run(
        &model,
        Wire::OpenAi,
        &everything_stdio(),
        &["--tools", "meta", "sum"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let told = model.requests()[1].body.to_string();
    assert!(
        told.contains(r#"unknown server \"everythin\"; the servers are everything"#),
        "{told}"
    );
    assert!(
        told.contains(r#"no tool \"get_summ\" on server \"everything\""#)
            && told.contains(r#"tool \"get-sum\""#),
        "{told}"
    );
}

#[test]
fn an_exact_tool_name_is_never_missed() {
    // In the question, among 1,853 tools with many near-duplicates of the same intent.
    for (question, wanted) in [
        (
            "Use calculate_binomial_probability for 5 heads in 8 tosses",
            "bfcl__calculate_binomial_probability",
        ),
        ("call the `sum` tool on 2 and 3", "bfcl__sum"),
    ] {
        let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("ok")]);
        let run = tether_run(
            &model,
            Wire::OpenAi,
            &bfcl_stdio(),
            &["--tools", "search", question],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let first = names(&model.requests()[0]);
        assert_eq!(
            first.get(1).map(String::as_str),
            Some(wanted),
            "{question}: {first:?}"
        );
    }
    // In a search_tools query, plain or qualified, and with select:.
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::calls(&[
                (
                    "call_1",
                    "search_tools",
                    r#"{"query": "triangle.area", "limit": 1}"#,
                ),
                (
                    "call_2",
                    "search_tools",
                    r#"{"query": "select:bfcl__geometry_area_triangle,calc_area_triangle"}"#,
                ),
            ]),
            Reply::text("ok"),
        ],
    );
    let run = tether_run(
        &model,
        Wire::OpenAi,
        &bfcl_stdio(),
        &["--tools", "search", "--json", "hello"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let second = names(&model.requests()[1]);
    let tail: Vec<&str> = second
        .iter()
        .map(String::as_str)
        .skip(second.len() - 3)
        .collect();
    assert_eq!(
        tail,
        [
            "bfcl__triangle_area",
            "bfcl__geometry_area_triangle",
            "bfcl__calc_area_triangle"
        ],
        "{second:?}"
    );
}

#[test]
fn tools_search_prints_the_ranking() {
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "tools",
            "--stdio",
            &bfcl_stdio(),
            "--search",
            "math.factorial",
            "--limit",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["name"], "bfcl__math_factorial");
    assert_eq!(rows[0]["exact"], true);
    assert!(rows[0]["score"].as_f64().unwrap() >= rows[1]["score"].as_f64().unwrap());
    assert!(
        rows[1]["description"]
            .as_str()
            .unwrap()
            .contains("factorial"),
        "{rows:?}"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["tools", "--stdio", &bfcl_stdio(), "--tokens", "--json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tokens: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(tokens["total"]["tools"], 1853);
    assert!(
        tokens["modes"]["all"].as_u64().unwrap() > 200_000,
        "{tokens}"
    );
    for mode in ["search", "meta", "auto"] {
        assert!(
            tokens["modes"][mode].as_u64().unwrap() < 2_000,
            "{mode}: {tokens}"
        );
    }
}

#[test]
fn config_selects_the_mode_and_always_load_keeps_a_server_sent() {
    let dir = scratch_dir("tool_search", "config");
    let config = dir.join("config.json");
    let bfcl = bfcl_stdio();
    let (_, command) = bfcl.split_once('=').unwrap();
    let words = shlex::split(command).unwrap();
    let everything = everything_stdio();
    let everything_words = shlex::split(&everything).unwrap();
    std::fs::write(
        &config,
        serde_json::json!({
            "toolSelection": "search",
            "mcpServers": {
                "bfcl": {"command": words[0], "args": &words[1..]},
                "everything": {"command": everything_words[0], "args": &everything_words[1..], "alwaysLoad": true}
            }
        })
        .to_string(),
    )
    .unwrap();
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("ok")]);
    let run_with_config = || {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["run", "--config"])
            .arg(&config)
            .args([
                "--model",
                "openai:scripted-model",
                "--base-url",
                &model.base_url(),
                "hello",
            ])
            .env("OPENAI_API_KEY", "test-key")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let output = run_with_config();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let offered = names(&model.requests()[0]);
    assert!(
        offered[0].starts_with("everything__"),
        "always-loaded tools come first: {offered:?}"
    );
    assert!(offered.contains(&"search_tools".to_string()), "{offered:?}");
    assert!(
        !offered.iter().any(|n| n.starts_with("bfcl__sum")),
        "{offered:?}"
    );

    std::fs::write(&config, r#"{"toolSelection": "smart", "mcpServers": {}}"#).unwrap();
    let output = run_with_config();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("config.json: \"toolSelection\" is \"smart\"; use \"all\", \"search\", \"meta\" or \"auto\""),
        "{stderr}"
    );
}

#[test]
fn a_chat_offers_the_tools_a_server_added_in_an_earlier_turn() {
    // Turn 1 calls `boom`, after which the server adds `grown_tool` and says so; turn 2 must
    // offer it (each turn used to get a copy of the tools from the chat's start).
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_1", "misbehaving_server__boom", "{}"),
            Reply::text("done"),
            Reply::text("still here"),
        ],
    );
    let output = chat(
        &model,
        "chat",
        &[
            "--approve",
            "auto",
            "--tools",
            "all",
            "--stdio",
            &misbehaving_stdio("grows"),
        ],
        "boom please\nand now?\n",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(!names(&requests[0]).contains(&"misbehaving_server__grown_tool".to_string()));
    assert!(
        names(&requests[2]).contains(&"misbehaving_server__grown_tool".to_string()),
        "the second turn sees the grown tool: {:?}",
        names(&requests[2])
    );
}

#[test]
fn chat_marks_the_tools_a_turn_loaded() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call(
                "call_1",
                "search_tools",
                r#"{"query": "binomial probability", "limit": 2}"#,
            ),
            Reply::text("found them"),
        ],
    );
    let output = chat(
        &model,
        "chat-marks",
        &["--tools", "search", "--stdio", &bfcl_stdio()],
        "hello there\n/tools binomial\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("+ search \"binomial probability\" loaded bfcl__"),
        "the turn says what it loaded: {stderr}"
    );
    // `/tools` is output: on stdout over a pipe.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let marked: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with(" *bfcl__"))
        .collect();
    assert_eq!(marked.len(), 2, "the two loaded tools are marked: {stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  bfcl__") && l.contains("binomial")),
        "tools not loaded are listed unmarked: {stdout}"
    );
}

#[test]
fn search_finds_a_tool_by_meaning_unless_semantic_search_is_off() {
    let dir = scratch_dir("tool_search", "semantic");
    let lexical = dir.join("lexical.json");
    // An empty server list: the built-in server, with these settings.
    std::fs::write(&lexical, r#"{"mcpServers": {}, "semanticSearch": false}"#).unwrap();
    let broken = dir.join("broken.json");
    std::fs::write(&broken, r#"{"mcpServers": {}, "semanticSearch": "yes"}"#).unwrap();
    let search = |config: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("--config")
            .arg(config)
            .args(["tools", "--search", "take 9 away from 30", "--limit", "3"])
            .arg("--json")
            .output()
            .unwrap()
    };
    // The built-in server: no word of the question is in `subtract`'s name or description.
    let default = dir.join("default.json");
    std::fs::write(&default, r#"{"mcpServers": {}}"#).unwrap();
    let output = search(&default);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    assert!(names.contains(&"builtin__subtract"), "{names:?}");

    let output = search(&lexical);
    assert!(output.status.success());
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert!(rows.is_empty(), "lexical search matched words: {rows:?}");

    let output = search(&broken);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("semanticSearch") && stderr.contains("expected true or false"),
        "{stderr}"
    );
}
