//! End-to-end tests of `tether run`: the real binary, a scripted model server speaking the
//! OpenAI, Anthropic or Ollama wire format on loopback, and real MCP servers. Each test
//! asserts on the requests Tether sent the model: history order, roles, call-id pairing,
//! tool schemas, and what the model was told after each kind of error.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::model::{Recorded, Reply, ScriptedModel, Wire};
use test_support::{everything_stdio, misbehaving_stdio, npm_bin};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON event lines of a `--json` run.
    fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The `--json` event of `kind` (the first one).
    fn event(&self, kind: &str) -> Value {
        self.events()
            .into_iter()
            .find(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} event:\n{}\n{}", self.stdout, self.stderr))
    }
}

fn tether(args: &[&str]) -> Run {
    let dir = std::env::temp_dir().join(format!("tether-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .env_remove("TETHER_MODEL")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("tether runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn model_flag(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenAi => "openai:scripted-model",
        Wire::Anthropic => "anthropic:scripted-model",
        Wire::Ollama => "ollama:scripted-model",
    }
}

/// Runs `question` against everything over stdio with the scripted model.
fn run_with(model: &ScriptedModel, wire: Wire, question: &str, extra: &[&str]) -> Run {
    let everything = everything_stdio();
    let base = model.base_url();
    let mut args = vec![
        "run",
        "--model",
        model_flag(wire),
        "--base-url",
        &base,
        "--stdio",
        &everything,
    ];
    args.extend_from_slice(extra);
    args.push(question);
    tether(&args)
}

fn messages(request: &Recorded) -> &Vec<Value> {
    request.body["messages"].as_array().expect("messages array")
}

/// The OpenAI-format tool message answering `id` in a recorded request.
fn tool_reply<'a>(request: &'a Recorded, id: &str) -> &'a Value {
    messages(request)
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no tool message for {id} in {:#}", request.body))
}

#[test]
fn openai_format_calls_get_sum_and_prints_the_answer() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_1", "everything__get-sum", r#"{"a": 2, "b": 3}"#),
            Reply::text("2 + 3 = 5."),
        ],
    );
    let run = run_with(
        &model,
        Wire::OpenAi,
        "What is 2+3? Use the tools.",
        &["--approve", "auto"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "2 + 3 = 5.");
    assert!(
        run.stderr
            .contains("→ everything__get-sum {\"a\":2,\"b\":3}"),
        "{}",
        run.stderr
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    let first = &requests[0].body;
    assert_eq!(first["stream"], true);
    assert_eq!(first["tool_choice"], "auto");
    let roles: Vec<&str> = messages(&requests[0])
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user"]);
    let sum = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "everything__get-sum")
        .expect("tool offered");
    assert_eq!(sum["type"], "function");
    assert_eq!(
        sum["function"]["parameters"]["properties"]["a"]["type"],
        "number"
    );
    assert!(
        sum["function"]["parameters"].get("$schema").is_none(),
        "provider-safe schema"
    );
    let system = messages(&requests[0])[0]["content"].as_str().unwrap();
    assert!(
        system.contains("Instructions from the \"everything\" server"),
        "server instructions injected"
    );

    let second = messages(&requests[1]);
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"a": 2, "b": 3}"#
    );
    assert_eq!(second[2]["content"], "", "content is a string, never null");
    assert_eq!(
        tool_reply(&requests[1], "call_1")["content"],
        "The sum of 2 and 3 is 5."
    );
}

#[test]
fn anthropic_format_calls_get_sum_and_prints_the_answer() {
    let model = ScriptedModel::start(
        Wire::Anthropic,
        vec![
            Reply::call("toolu_1", "everything__get-sum", r#"{"a": 2, "b": 3}"#),
            Reply::text("It is 5."),
        ],
    );
    let run = run_with(
        &model,
        Wire::Anthropic,
        "What is 2+3? Use the tools.",
        &["--approve", "auto"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "It is 5.");
    let requests = model.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    let first = &requests[0].body;
    assert!(first["system"].as_str().unwrap().contains("MCP servers"));
    assert!(first["max_tokens"].as_u64().unwrap() > 0);
    assert_eq!(first["tool_choice"], json!({"type": "auto"}));
    let tool = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "everything__get-sum")
        .unwrap();
    assert_eq!(tool["input_schema"]["type"], "object");

    let second = messages(&requests[1]);
    assert_eq!(
        second.len(),
        3,
        "user, assistant tool_use, user tool_result: {second:#?}"
    );
    assert_eq!(
        second[1]["content"][0],
        json!({"type": "tool_use", "id": "toolu_1", "name": "everything__get-sum", "input": {"a": 2, "b": 3}})
    );
    assert_eq!(second[2]["role"], "user");
    assert_eq!(second[2]["content"][0]["type"], "tool_result");
    assert_eq!(second[2]["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(
        second[2]["content"][0]["content"][0]["text"],
        "The sum of 2 and 3 is 5."
    );
}

#[test]
fn ollama_format_calls_get_sum_and_prints_the_answer() {
    let model = ScriptedModel::start(
        Wire::Ollama,
        vec![
            Reply::call("ignored", "everything__get-sum", r#"{"a": 2, "b": 3}"#),
            Reply::text("Five."),
        ],
    );
    let run = run_with(
        &model,
        Wire::Ollama,
        "What is 2+3? Use the tools.",
        &["--approve", "auto"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "Five.");
    let requests = model.requests();
    assert_eq!(requests[0].path, "/api/chat");
    let second = messages(&requests[1]);
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["arguments"],
        json!({"a": 2, "b": 3})
    );
    assert_eq!(second[3]["tool_name"], "everything__get-sum");
    assert_eq!(second[3]["content"], "The sum of 2 and 3 is 5.");
}

/// `tether run -` reads the question from standard input; an empty input is a one-line error.
#[test]
fn run_reads_its_question_from_standard_input() {
    use std::io::Write;
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("Five.")]);
    let base = model.base_url();
    let ask = |input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args([
                "run",
                "--model",
                "openai:scripted-model",
                "--base-url",
                &base,
                "-",
            ])
            .env("NO_COLOR", "1")
            .env("OPENAI_API_KEY", "test-key")
            .env_remove("TETHER_MODEL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    };
    let output = ask(b"What is 2+3?\nAnswer in words.\n");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "Five.");
    let requests = model.requests();
    let user = messages(&requests[0])
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    assert_eq!(user["content"], "What is 2+3?\nAnswer in words.");

    let output = ask(b"  \n");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("standard input was empty"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn no_tool_needed_streams_the_answer_and_json_reports_usage() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![Reply::text("Hello! Nothing to compute here.")],
    );
    let run = run_with(&model, Wire::OpenAi, "Say hello", &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = run.events();
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "text_delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello! Nothing to compute here.");
    assert!(
        events.iter().filter(|e| e["type"] == "text_delta").count() > 1,
        "streamed in pieces"
    );
    let ended = run.event("turn_ended");
    assert_eq!(
        ended["usage"],
        json!({"inputTokens": 11, "outputTokens": 7})
    );
    assert_eq!(ended["steps"], 1);
    assert_eq!(ended["stop_reason"], "end_turn");
    assert_eq!(
        run.events().last().unwrap()["type"],
        "session_ended",
        "the session's last event"
    );
    assert_eq!(
        run.event("session_ended")["messages"][1],
        json!({"role": "assistant", "content": "Hello! Nothing to compute here."})
    );
}

#[test]
fn parallel_calls_run_concurrently_and_results_keep_call_order() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::calls(&[
                (
                    "call_slow",
                    "everything__trigger-long-running-operation",
                    r#"{"duration": 2, "steps": 2}"#,
                ),
                ("call_fast", "everything__echo", r#"{"message": "quick"}"#),
                (
                    "call_slow2",
                    "everything__trigger-long-running-operation",
                    r#"{"duration": 2, "steps": 1}"#,
                ),
            ]),
            Reply::text("done"),
        ],
    );
    let run = run_with(&model, Wire::OpenAi, "run them", &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = run.events();
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), 3);
    for slow in finished
        .iter()
        .filter(|e| e["name"] == "everything__trigger-long-running-operation")
    {
        assert!(slow["duration_ms"].as_u64().unwrap() >= 1900, "{slow}");
    }
    // A call's start event is sent when it begins to run, so in sequence each start would
    // follow the previous call's finish; in parallel all three start before either slow call
    // (two seconds each) finishes. The quick echo may finish at any point, so it is not
    // counted. Order, not wall time, so a busy machine cannot flake it.
    let calls: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| Some((e["type"].as_str()?, e["name"].as_str()?)))
        .filter(|(kind, _)| kind.starts_with("tool_call_"))
        .collect();
    let first_slow_finish = calls
        .iter()
        .position(|(kind, name)| {
            *kind == "tool_call_finished" && *name == "everything__trigger-long-running-operation"
        })
        .unwrap();
    let started_before = calls[..first_slow_finish]
        .iter()
        .filter(|(kind, _)| *kind == "tool_call_started")
        .count();
    assert_eq!(started_before, 3, "{calls:?}");
    let requests = model.requests();
    let ids: Vec<&str> = messages(&requests[1])
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_slow", "call_fast", "call_slow2"]);
    assert_eq!(
        tool_reply(&model.requests()[1], "call_fast")["content"],
        "Echo: quick"
    );
}

#[test]
fn chain_feeds_one_result_into_the_next_call() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_a", "everything__get-sum", r#"{"a": 20, "b": 22}"#),
            Reply::call(
                "call_b",
                "everything__echo",
                r#"{"message": "the sum is 42"}"#,
            ),
            Reply::text("Echoed: the sum is 42"),
        ],
    );
    let run = run_with(
        &model,
        Wire::OpenAi,
        "add then echo",
        &["--approve", "auto"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        tool_reply(&requests[1], "call_a")["content"],
        "The sum of 20 and 22 is 42."
    );
    let third = messages(&requests[2]);
    let roles: Vec<&str> = third.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "tool"],
        "history kept in order"
    );
    assert_eq!(
        tool_reply(&requests[2], "call_b")["content"],
        "Echo: the sum is 42"
    );
}

#[test]
fn bad_calls_become_error_results_the_model_can_recover_from() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::calls(&[
                ("c_json", "everything__get-sum", r#"{"a": 2,"#),
                ("c_unknown", "everything__get_sum", r#"{"a": 2, "b": 3}"#),
                ("c_schema", "everything__get-sum", r#"{"a": "two", "b": 3}"#),
                ("c_ok", "everything__get-sum", r#"{"a": 1, "b": 1}"#),
            ]),
            Reply::text("Recovered."),
        ],
    );
    let run = run_with(&model, Wire::OpenAi, "try", &["--approve", "auto"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "Recovered.");
    let second = &model.requests()[1];
    let text = |id: &str| {
        tool_reply(second, id)["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        text("c_json").starts_with("Error: arguments are not valid JSON"),
        "{}",
        text("c_json")
    );
    assert_eq!(
        text("c_unknown"),
        "Error: unknown tool \"everything__get_sum\"; did you mean everything__get-sum?"
    );
    assert!(
        text("c_schema").starts_with("Error: arguments do not match the tool's input schema: /a:"),
        "{}",
        text("c_schema")
    );
    assert!(text("c_schema").contains("\"two\""), "{}", text("c_schema"));
    assert_eq!(text("c_ok"), "The sum of 1 and 1 is 2.");
}

fn run_against(server: &str, model: &ScriptedModel, extra: &[&str]) -> Run {
    let base = model.base_url();
    let mut args = vec![
        "run",
        "--model",
        "openai:scripted",
        "--base-url",
        &base,
        "--stdio",
        server,
        "--approve",
        "auto",
    ];
    args.extend_from_slice(extra);
    args.push("go");
    tether(&args)
}

#[test]
fn tool_is_error_and_server_crash_reach_the_model() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "misbehaving_server__boom", "{}"),
            Reply::text("The disk is full."),
        ],
    );
    let run = run_against(&misbehaving_stdio("tool-error"), &model, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        tool_reply(&model.requests()[1], "c1")["content"],
        "Error: disk is full"
    );

    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "misbehaving_server__boom", "{}"),
            Reply::text("The server crashed."),
        ],
    );
    let run = run_against(&misbehaving_stdio("crash-on-call"), &model, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let told = tool_reply(&model.requests()[1], "c1")["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(told.starts_with("Error: the call failed: server \"misbehaving_server\": tool \"boom\" failed: the server exited with status 70"), "{told}");
}

#[test]
fn denied_approval_is_an_error_result_not_an_abort() {
    // toggle-simulated-logging is not read-only, so the default policy asks; nobody can answer.
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__toggle-simulated-logging", "{}"),
            Reply::text("I was not allowed to."),
        ],
    );
    let run = run_with(&model, Wire::OpenAi, "toggle logging", &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let told = tool_reply(&model.requests()[1], "c1")["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        told.contains(
            "needs the user's approval (it is not marked read-only) and this run is non-interactive"
        ),
        "{told}"
    );
    assert!(
        !run.events()
            .iter()
            .any(|e| e["type"] == "tool_call_started"),
        "the tool never ran"
    );

    // Read-only tools run without approval.
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__echo", r#"{"message": "hi"}"#),
            Reply::text("ok"),
        ],
    );
    let run = run_with(&model, Wire::OpenAi, "echo", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        tool_reply(&model.requests()[1], "c1")["content"],
        "Echo: hi"
    );
}

#[test]
fn max_steps_and_repeated_failures_stop_with_an_explanation() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__echo", r#"{"message": "1"}"#),
            Reply::call("c2", "everything__echo", r#"{"message": "2"}"#),
        ],
    );
    let run = run_with(&model, Wire::OpenAi, "loop", &["--max-steps", "2"]);
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error: Stopped after 2 model calls (--max-steps 2)"),
        "{}",
        run.stderr
    );

    let same = || Reply::call("c", "everything__nope", "{}");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![same(), same(), same(), Reply::text("unreachable")],
    );
    let run = run_with(&model, Wire::OpenAi, "loop", &[]);
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(
        run.stderr.contains("Stopped: the model called everything__nope with the same arguments 3 times and it failed each time"),
        "{}",
        run.stderr
    );
    assert_eq!(model.requests().len(), 3);
}

#[test]
fn prompt_based_mode_end_to_end() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::text(
                "```json\n{\"tool\": \"everything__get-sum\", \"arguments\": {\"a\": 2, \"b\": 3,}}\n```",
            ),
            Reply::text("The answer is 5."),
        ],
    );
    let run = run_with(
        &model,
        Wire::OpenAi,
        "What is 2+3?",
        &["--tool-mode", "prompt", "--approve", "auto"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.trim(),
        "The answer is 5.",
        "the JSON call is not shown as the answer"
    );
    let requests = model.requests();
    assert!(
        requests[0].body.get("tools").is_none(),
        "no native tools in prompt mode"
    );
    let system = messages(&requests[0])[0]["content"].as_str().unwrap();
    assert!(
        system.contains("{\"tool\": \"<tool name>\", \"arguments\""),
        "{system}"
    );
    assert!(system.contains("- everything__get-sum: "), "{system}");
    let second = messages(&requests[1]);
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(
        second[3]["content"],
        "Tool result for everything__get-sum (call call_1_0):\nThe sum of 2 and 3 is 5."
    );
}

#[test]
fn provider_rejecting_tools_switches_to_prompt_mode() {
    let model = ScriptedModel::start(
        Wire::Ollama,
        vec![
            Reply::error(
                400,
                json!({"error": "registry.ollama.ai/library/gemma3:1b does not support tools"}),
            ),
            Reply::text("{\"tool\": \"everything__echo\", \"arguments\": {\"message\": \"hi\"}}"),
            Reply::text("Echo done."),
        ],
    );
    let run = run_with(&model, Wire::Ollama, "echo hi", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("switching to prompt-based tool calling"),
        "{}",
        run.stderr
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].body.get("tools").is_some());
    assert!(requests[1].body.get("tools").is_none());
    assert!(
        messages(&requests[2])[3]["content"]
            .as_str()
            .unwrap()
            .contains("Echo: hi")
    );
}

#[test]
fn rate_limit_then_success_honours_retry_after() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::Http {
                status: 429,
                headers: vec![("retry-after-ms".into(), "300".into())],
                body: json!({"error": {"message": "Rate limit reached", "type": "requests"}})
                    .to_string(),
            },
            Reply::text("Fine now."),
        ],
    );
    let run = run_with(&model, Wire::OpenAi, "hi", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "Fine now.");
    assert!(
        run.stderr
            .contains("rate limited: Rate limit reached; retrying in 0.3s (attempt 2 of 4)"),
        "{}",
        run.stderr
    );
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn context_window_and_auth_errors_are_reported_clearly() {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![Reply::error(
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", "code": "context_length_exceeded"}}),
        )],
    );
    let run = run_with(&model, Wire::OpenAi, "hi", &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("error: openai:scripted-model: the conversation is longer than the model's context window: This model's maximum context length is 8192 tokens."), "{}", run.stderr);
    assert_eq!(model.requests().len(), 1, "not retried");

    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![Reply::error(
            401,
            json!({"error": {"message": "Incorrect API key provided"}}),
        )],
    );
    let run = run_with(&model, Wire::OpenAi, "hi", &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("authentication failed: Incorrect API key provided (check OPENAI_API_KEY)"),
        "{}",
        run.stderr
    );
}

#[test]
fn server_filesystem_tools_in_the_loop() {
    let dir = std::env::temp_dir().join(format!("tether-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "remember the milk").unwrap();
    let server = format!(
        "{} {}",
        npm_bin("mcp-server-filesystem").display(),
        dir.display()
    );
    let path = dir.join("notes.txt").display().to_string();
    let arguments = json!({"path": path}).to_string();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "filesystem__read_text_file", &arguments),
            Reply::text("It says to remember the milk."),
        ],
    );
    let base = model.base_url();
    // server-filesystem replaces its command-line directories with the client's roots.
    let root = dir.display().to_string();
    let run = tether(&[
        "run",
        "--model",
        "openai:scripted",
        "--base-url",
        &base,
        "--root",
        &root,
        "--stdio",
        &server,
        "What is in notes.txt?",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        tool_reply(&model.requests()[1], "c1")["content"],
        "remember the milk"
    );
}

#[test]
fn unknown_provider_is_a_usage_error() {
    let run = tether(&["run", "--model", "opnai:gpt-4o", "hello"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("unknown provider \"opnai\""),
        "{}",
        run.stderr
    );
}

#[test]
fn ctrl_c_cancels_the_turn_and_its_tool_call() {
    use std::io::{BufRead, BufReader};
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![Reply::call(
            "c1",
            "everything__trigger-long-running-operation",
            r#"{"duration": 30, "steps": 30}"#,
        )],
    );
    let everything = everything_stdio();
    let base = model.base_url();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "run",
            "--json",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "--stdio",
            &everything,
            "wait",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait for the event, not for a guessed time: the call is running once it is announced.
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("\"tool_call_started\""));
    assert!(started.is_some(), "the tool call started");
    let interrupted = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let code = child.wait().unwrap().code();
    assert_eq!(code, Some(130), "{rest:?}");
    assert!(
        interrupted.elapsed() < Duration::from_secs(10),
        "stopped promptly, not after the 30 s call"
    );
    let events: Vec<Value> = rest
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ended = events.iter().find(|e| e["type"] == "turn_ended").unwrap();
    assert_eq!(ended["stop_reason"], "cancelled");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "session_ended");
    assert_eq!(
        last["messages"][0]["role"], "user",
        "the conversation so far is kept"
    );
}

/// A config with a fast server (the built-in tools) and a gated one that starts only when
/// the test writes a line to the FIFO `gate` (its shell's pid goes to `pid` first).
fn fast_and_gated(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let gate = dir.join("gate");
    let pid = dir.join("pid");
    assert!(
        Command::new("mkfifo")
            .arg(&gate)
            .status()
            .unwrap()
            .success()
    );
    let tether = env!("CARGO_BIN_EXE_tether");
    let script = format!(
        // `$$$$`: the config turns `$$` into one `$`, so the shell sees `$$`, its own pid.
        "echo $$$$ > '{}'; read line < '{}'; exec '{tether}' builtin-server",
        pid.display(),
        gate.display()
    );
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {
            "fast": {"command": tether, "args": ["builtin-server"]},
            "gated": {"command": "sh", "args": ["-c", script], "startupTimeout": 300}
        }})
        .to_string(),
    )
    .unwrap();
    (config, gate, pid)
}

#[test]
fn run_does_not_wait_for_a_server_still_starting() {
    let dir = test_support::scratch_dir("run", "not_waiting");
    let (config, _gate, pid) = fast_and_gated(&dir);
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_1", "fast__add", r#"{"a": 2, "b": 3}"#),
            Reply::text("5"),
        ],
    );
    let base = model.base_url();
    let config = config.display().to_string();
    // The gate is never opened: with a 300 s start-up timeout, waiting for the gated server
    // would mean no answer for five minutes.
    let run = tether(&[
        "run",
        "--model",
        "openai:scripted-model",
        "--base-url",
        &base,
        "--config",
        &config,
        "What is 2 + 3?",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains('5'), "{}", run.stdout);
    let requests = model.requests();
    let first = requests[0].offered_tools();
    assert!(first.contains(&"fast__add".to_string()), "{first:?}");
    assert!(!first.iter().any(|t| t.starts_with("gated__")), "{first:?}");
    assert!(
        !run.stderr.contains("gated"),
        "nothing to warn about: {}",
        run.stderr
    );
    // The gated server's shell was stopped with the run, not left behind.
    let pid = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    test_support::wait_until_stopped(pid, "the gated server");
}

#[test]
fn run_waits_for_a_starting_server_whose_pinned_tools_fit_the_request() {
    let dir = test_support::scratch_dir("run", "waits_for_fitting");
    let tether = env!("CARGO_BIN_EXE_tether");
    // An earlier run's pins: the server named "gated" as it was when it started at once.
    let earlier = dir.join("earlier.json");
    std::fs::write(
        &earlier,
        json!({"mcpServers": {"gated": {"command": tether, "args": ["builtin-server"]}}})
            .to_string(),
    )
    .unwrap();
    let accepted = Command::new(tether)
        .args([
            "--config",
            earlier.to_str().unwrap(),
            "pins",
            "accept",
            "gated",
        ])
        .env("TETHER_DATA_DIR", &dir)
        .output()
        .unwrap();
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let (config, gate, _) = fast_and_gated(&dir);
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_1", "gated__add", r#"{"a": 2, "b": 3}"#),
            Reply::text("5"),
        ],
    );
    let mut child = Command::new(tether)
        .args([
            "run",
            "--json",
            "--model",
            "openai:scripted-model",
            "--base-url",
        ])
        .arg(model.base_url())
        .arg("--config")
        .arg(&config)
        .arg("What is 2 + 3? Use the add tool.")
        .current_dir(&dir)
        .env("OPENAI_API_KEY", "test-key")
        .env("TETHER_DATA_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut notices = Vec::new();
    let mut answer = String::new();
    let mut opener = None;
    for line in std::io::BufRead::lines(stdout) {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let message = event["message"].as_str().unwrap_or_default().to_string();
        // The gate opens only once the run says it waits: had the run gone on without the
        // server, its first request could not offer the server's tools.
        if opener.is_none() && message.starts_with("waiting for server \"gated\"") {
            let gate = gate.clone();
            opener = Some(std::thread::spawn(move || {
                std::fs::write(gate, "go\n").unwrap()
            }));
        }
        if event["type"] == "notice" {
            notices.push(message);
        }
        if let Some(text) = event["text"].as_str() {
            answer.push_str(text);
        }
    }
    assert!(child.wait().unwrap().success(), "{notices:#?}");
    opener
        .unwrap_or_else(|| panic!("the run did not say it waits for \"gated\": {notices:#?}"))
        .join()
        .unwrap();
    assert!(
        notices.contains(
            &"waiting for server \"gated\" to finish starting: its tool \"add\" fits this request"
                .to_string()
        ),
        "{notices:#?}"
    );
    let requests = model.requests();
    let first = requests[0].offered_tools();
    assert!(first.contains(&"gated__add".to_string()), "{first:?}");
    assert!(answer.contains('5'), "{answer}");
}

#[test]
fn chat_offers_a_late_server_from_the_next_request() {
    use std::io::{BufRead, Write};
    let dir = test_support::scratch_dir("run", "late_server");
    let (config, gate, _) = fast_and_gated(&dir);
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("one"), Reply::text("two")]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["chat", "--model", "openai:scripted-model", "--base-url"])
        .arg(model.base_url())
        .arg("--config")
        .arg(&config)
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test-key")
        .env("TETHER_DATA_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                let _ = lines.send(line);
            }
        });
    }
    let wait_for = |text: &str| loop {
        let line = seen
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no line containing {text:?}"));
        if line.contains(text) {
            return line;
        }
    };
    writeln!(stdin, "first question").unwrap();
    wait_for("one");
    std::fs::write(&gate, "go\n").unwrap();
    let notice = wait_for("\"gated\" is ready");
    assert!(
        notice.contains("offered from the next model request"),
        "{notice}"
    );
    writeln!(stdin, "second question").unwrap();
    wait_for("two");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let requests = model.requests();
    assert!(
        !requests[0]
            .offered_tools()
            .iter()
            .any(|t| t.starts_with("gated__"))
    );
    assert!(
        requests[1]
            .offered_tools()
            .contains(&"gated__add".to_string()),
        "{:?}",
        requests[1].offered_tools()
    );
}

/// MCP Apps: a tool whose `_meta.ui.visibility` is `["app"]` belongs to its app's view, so
/// the model is never offered it; the tester still lists it, with its `ui://` resource, and
/// `tools --json` keeps every tool's `_meta` and `icons`.
#[test]
fn an_app_only_tool_is_never_offered_to_the_model_but_the_tester_shows_it() {
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("Nothing to do.")]);
    let server = misbehaving_stdio("decorated");
    let run = run_against(&server, &model, &["--tools", "all"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let offered = model.requests()[0].offered_tools();
    assert!(
        offered.contains(&"misbehaving_server__boom".to_string()),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|t| t.contains("app_only")),
        "{offered:?}"
    );

    let listed = tether(&["tools", "--stdio", &server]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("misbehaving_server__app_only")
            && listed.stdout.contains(
                "app: ui://decorated/dashboard.html; called by the app only, never offered to a model"
            ),
        "{}",
        listed.stdout
    );
    let listed = tether(&["tools", "--json", "--stdio", &server]);
    let tools: Value = serde_json::from_str(&listed.stdout).unwrap();
    let boom = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["qualifiedName"] == "misbehaving_server__boom")
        .unwrap_or_else(|| panic!("{tools:#}"));
    let text = boom.to_string();
    assert!(
        text.contains("\"example.com/owner\":\"decorations\"") && text.contains("icon.png"),
        "{boom:#}"
    );
}
