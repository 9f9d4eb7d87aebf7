//! End-to-end tests of the client side of MCP that servers drive: roots, sampling,
//! elicitation, progress, logging, list changes and cancellation. The real binary talks to
//! server-everything (and a fixture server where a behaviour must be forced), with the
//! scripted model server answering sampling requests.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use test_support::model::{Reply, ScriptedModel, Wire};
use test_support::{HttpServer, everything_stdio, fixture, npm_bin};

/// A fresh working directory for one test.
fn workdir(test: &str) -> PathBuf {
    test_support::scratch_dir("client", test)
}

fn tether(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(dir)
        .env("TETHER_DATA_DIR", dir)
        .env("NO_COLOR", "1")
        .env_remove("TETHER_MODEL")
        .stdin(Stdio::null())
        .output()
        .expect("tether runs")
}

/// Starts `tether ARGS` in `dir`, with its own data dir and piped standard streams.
fn spawn_in(dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(dir)
        .env("TETHER_DATA_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The JSON event lines of a `run --json`.
fn events(output: &Output) -> Vec<Value> {
    text(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// How a test reaches server-everything.
enum Via {
    Stdio,
    StreamableHttp(HttpServer),
    Sse(HttpServer),
}

impl Via {
    /// server-everything over each transport Tether speaks.
    fn all() -> Vec<Via> {
        vec![
            Via::Stdio,
            Via::StreamableHttp(HttpServer::everything()),
            Via::Sse(HttpServer::everything_sse()),
        ]
    }

    fn name(&self) -> &'static str {
        match self {
            Via::Stdio => "stdio",
            Via::StreamableHttp(_) => "streamable HTTP",
            Via::Sse(_) => "HTTP+SSE",
        }
    }

    /// The config entry for server "everything".
    fn server(&self) -> Value {
        match self {
            Via::Stdio => json!({"command": npm_bin("mcp-server-everything"), "args": ["stdio"]}),
            Via::StreamableHttp(server) => json!({"type": "http", "url": server.url}),
            Via::Sse(server) => json!({"type": "sse", "url": server.url}),
        }
    }
}

/// A config file in `dir` with server-everything (over stdio) plus `extra` keys on it.
fn everything_config(dir: &Path, extra: Value) -> PathBuf {
    everything_config_via(dir, &Via::Stdio, extra)
}

/// A config file in `dir` with server-everything reached `via`, plus `extra` keys on it.
fn everything_config_via(dir: &Path, via: &Via, extra: Value) -> PathBuf {
    let mut server = via.server();
    for (key, value) in extra.as_object().unwrap() {
        server[key] = value.clone();
    }
    let path = dir.join("tether.json");
    std::fs::write(
        &path,
        json!({"mcpServers": {"everything": server}}).to_string(),
    )
    .unwrap();
    path
}

#[test]
fn roots_come_from_root_flags_and_server_logs_follow_log_level() {
    let dir = workdir("roots");
    let everything = everything_stdio();
    let shown = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "--root",
            "/srv/projects/alpha",
            "call",
            "everything",
            "get-roots-list",
        ],
    );
    let stdout = text(&shown.stdout);
    let stderr = text(&shown.stderr);
    assert_eq!(shown.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("file:///srv/projects/alpha"), "{stdout}");
    // The server logs at info when it receives our roots; the default level shows it.
    assert!(
        stderr.contains("[everything everything-server] info: Roots updated: 1 root(s)"),
        "{stderr}"
    );

    let hidden = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "--log-level",
            "warning",
            "call",
            "everything",
            "get-roots-list",
        ],
    );
    let stdout = text(&hidden.stdout);
    assert!(
        !stdout.contains("file://") && stdout.contains("no roots"),
        "no root is offered unless asked (not even the working directory): {stdout}"
    );
    assert!(!text(&hidden.stderr).contains("Roots updated"));

    let typo = tether(&dir, &["--log-level", "loud", "servers"]);
    assert_eq!(typo.status.code(), Some(1));
    assert!(
        text(&typo.stderr).contains("warning"),
        "valid levels are listed"
    );
}

/// The progress lines `tether call` printed.
fn progress_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("trigger-long-running-operation ["))
        .map(str::to_string)
        .collect()
}

#[test]
fn roots_logs_progress_and_elicitation_work_over_every_transport() {
    for via in Via::all() {
        let dir = workdir(&format!("transport-{}", via.name().replace(' ', "-")));
        let config = everything_config_via(&dir, &via, json!({}));
        let config = config.to_str().unwrap();
        let roots = tether(
            &dir,
            &[
                "--config",
                config,
                "--root",
                "/srv/alpha",
                "call",
                "everything",
                "get-roots-list",
            ],
        );
        let (stdout, stderr) = (text(&roots.stdout), text(&roots.stderr));
        assert!(
            stdout.contains("file:///srv/alpha"),
            "{}: {stdout}{stderr}",
            via.name()
        );
        // Over stdio the log and the result share one ordered pipe; over HTTP the log may
        // come on another stream after the result, so only stdio can promise it was shown.
        if matches!(via, Via::Stdio) {
            assert!(stderr.contains("info: Roots updated"), "{stderr}");
        }

        let long = tether(
            &dir,
            &[
                "--config",
                config,
                "call",
                "everything",
                "trigger-long-running-operation",
                "duration=1",
                "steps=4",
            ],
        );
        let stderr = text(&long.stderr);
        assert_eq!(long.status.code(), Some(0), "{}: {stderr}", via.name());
        let lines = progress_lines(&stderr);
        assert_eq!(lines.len(), 4, "{}: {stderr}", via.name());
        assert!(lines[0].contains("25% (1/4)") && lines[3].contains("100% (4/4)"));

        let declined = tether(
            &dir,
            &[
                "--config",
                config,
                "call",
                "everything",
                "trigger-elicitation-request",
            ],
        );
        assert!(
            text(&declined.stdout).contains("\"action\": \"decline\""),
            "{}: {}",
            via.name(),
            text(&declined.stderr)
        );
    }
}

#[test]
fn an_sse_server_is_found_from_a_plain_url_by_falling_back() {
    let server = HttpServer::everything_sse();
    let dir = workdir("sse-fallback");
    let url = format!("everything={}", server.url);
    let output = tether(&dir, &["--url", &url, "--json", "servers"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows[0]["status"], "connected", "{rows}");
}

#[test]
fn a_long_call_shows_its_progress_in_order() {
    let dir = workdir("progress");
    let everything = everything_stdio();
    let output = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "call",
            "everything",
            "trigger-long-running-operation",
            "duration=1",
            "steps=4",
        ],
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    // Every notification is handled in order before the result it precedes.
    let lines = progress_lines(&stderr);
    assert_eq!(
        lines,
        [
            "trigger-long-running-operation [#####...............]  25% (1/4)",
            "trigger-long-running-operation [##########..........]  50% (2/4)",
            "trigger-long-running-operation [###############.....]  75% (3/4)",
            "trigger-long-running-operation [####################] 100% (4/4)",
        ]
    );
}

/// The status messages of server-everything's `simulate-research-query`, a stage a second.
const STAGES: [&str; 4] = [
    "Gathering sources...",
    "Analyzing content...",
    "Synthesizing findings...",
    "Generating report...",
];

/// `execution.taskSupport` of `simulate-research-query` as `tools --json` shows it.
fn research_task_support(dir: &Path, config: &str) -> Value {
    let tools = tether(dir, &["--config", config, "tools", "--json"]);
    let tools: Value = serde_json::from_slice(&tools.stdout).unwrap();
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "simulate-research-query")
        .map(|t| t["execution"]["taskSupport"].clone())
        .unwrap_or_default()
}

/// server-everything's `simulate-research-query` may only run as a task (MCP 2025-11-25):
/// the tester shows the capability and `execution.taskSupport`, runs the task with a JSON
/// event per step, and routes the server's question (an elicitation, delivered while
/// `tasks/result` is open) to the user; a model's call runs it the same way.
#[test]
fn a_task_only_tool_runs_as_a_task_from_the_shell_and_for_the_model() {
    let dir = workdir("tasks");
    let config = everything_config(&dir, json!({}));
    let config = config.to_str().unwrap();
    let servers = tether(&dir, &["--config", config, "servers"]);
    assert!(
        text(&servers.stdout)
            .contains("tasks, tasks.list, tasks.cancel, tasks.requests.tools.call"),
        "{}",
        text(&servers.stdout)
    );
    assert_eq!(research_task_support(&dir, config), "required");

    let call = |args: &[&str]| {
        let mut all = vec![
            "--config",
            config,
            "call",
            "everything",
            "simulate-research-query",
        ];
        all.extend_from_slice(args);
        tether(&dir, &all)
    };
    let output = call(&["topic=rust", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let steps = test_support::task_events(&stdout);
    let result: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with(r#"{"type":"task""#))
        .collect();
    let statuses: Vec<&str> = steps
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.first(), Some(&"working"), "{stdout}");
    assert_eq!(statuses.last(), Some(&"completed"), "{stdout}");
    assert!(steps.iter().all(|s| s["taskId"] == steps[0]["taskId"]));
    // The server's own status messages arrive as steps: the task takes four seconds, one
    // stage a second, and it is polled every second, so at least one stage is seen.
    assert!(
        steps
            .iter()
            .any(|s| STAGES.contains(&s["message"].as_str().unwrap_or_default())),
        "{stdout}"
    );
    let result: Value = serde_json::from_str(&result.join("\n")).unwrap();
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("# Research Report: rust")
    );

    // The server's question reaches us mid-task; nobody can answer here, so it is declined.
    let output = call(&["topic=python", "ambiguous=true"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("asked for input; declined"));
    assert!(text(&output.stdout).contains("User declined - using default interpretation"));

    // Over both HTTP transports the call runs as a task, and `tools --json` keeps `execution`.
    for via in [
        Via::StreamableHttp(HttpServer::everything()),
        Via::Sse(HttpServer::everything_sse()),
    ] {
        let http = dir.join("http");
        std::fs::create_dir_all(&http).unwrap();
        let config = everything_config_via(&http, &via, json!({}));
        let output = tether(
            &http,
            &[
                "--config",
                config.to_str().unwrap(),
                "call",
                "everything",
                "simulate-research-query",
                "topic=waves",
            ],
        );
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}: {}",
            via.name(),
            text(&output.stderr)
        );
        assert!(
            text(&output.stdout).contains("# Research Report: waves"),
            "{}",
            via.name()
        );
        assert!(
            STAGES
                .iter()
                .any(|stage| text(&output.stderr).contains(stage)),
            "{}: {}",
            via.name(),
            text(&output.stderr)
        );
        // `execution` survives both readers: our SSE one, and Streamable HTTP's event data.
        assert_eq!(
            research_task_support(&http, config.to_str().unwrap()),
            "required"
        );
    }

    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call(
                "c1",
                "everything__simulate-research-query",
                r#"{"topic": "tides"}"#,
            ),
            Reply::text("Done."),
        ],
    );
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--config",
            config,
            "run",
            "--json",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "research tides",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let events = events(&output);
    let finished = events
        .iter()
        .find(|e| e["type"] == "tool_call_finished")
        .unwrap();
    assert_eq!(finished["is_error"], false, "{finished}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_progress" && e["task"]["status"] == "working")
    );
    let sent = model.requests();
    let told = sent[1].body.to_string();
    assert!(told.contains("Research Report: tides"), "{told}");
}

#[test]
fn run_reports_progress_events_before_the_result() {
    let dir = workdir("run-progress");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call(
                "c1",
                "everything__trigger-long-running-operation",
                r#"{"duration": 1, "steps": 4}"#,
            ),
            Reply::text("It finished."),
        ],
    );
    let everything = everything_stdio();
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "run",
            "--json",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "--stdio",
            &everything,
            "run the long operation",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let events = events(&output);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let finished = kinds
        .iter()
        .position(|k| *k == "tool_call_finished")
        .unwrap();
    let progress: Vec<f64> = events
        .iter()
        .filter(|e| e["type"] == "tool_progress")
        .map(|e| {
            assert_eq!(e["id"], "c1");
            assert_eq!(e["total"], 4.0);
            e["progress"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0, 4.0], "{kinds:?}");
    assert!(kinds.iter().rposition(|k| *k == "tool_progress").unwrap() < finished);
}

#[test]
fn sampling_is_answered_by_the_model_when_the_server_is_allowed() {
    for via in Via::all() {
        sampling_via(&via);
    }
}

fn sampling_via(via: &Via) {
    let dir = workdir(&format!("sampling-{}", via.name().replace(' ', "-")));
    let config = everything_config_via(&dir, via, json!({"sampling": "allow"}));
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call(
                "c1",
                "everything__trigger-sampling-request",
                r#"{"prompt": "Write one word about the sea", "maxTokens": 20}"#,
            ),
            Reply::text("Waves"),
            Reply::text("The server's model said: Waves"),
        ],
    );
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "--json",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "ask the server to sample",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    // The second request is the server's: its prompt, its token cap, and no tools.
    let sampling = &requests[1].body;
    assert_eq!(
        sampling["messages"],
        json!([
            {"role": "system", "content": "You are a helpful test server."},
            {"role": "user", "content": "Resource trigger-sampling-request context: Write one word about the sea"}
        ])
    );
    assert_eq!(sampling["max_tokens"], 20);
    assert!(sampling.get("tools").is_none_or(|t| t == &json!([])));
    // The sampled answer went back to the server and came back in the tool result.
    let tool_result = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert!(
        tool_result["content"].as_str().unwrap().contains("Waves"),
        "{tool_result}"
    );
}

#[test]
fn sampling_without_consent_is_refused_in_a_non_interactive_run() {
    let dir = workdir("sampling-refused");
    let config = everything_config(&dir, json!({}));
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call(
                "c1",
                "everything__trigger-sampling-request",
                r#"{"prompt": "secret", "maxTokens": 20}"#,
            ),
            Reply::text("It was refused."),
        ],
    );
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "--json",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "ask the server to sample",
        ],
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the model never saw the server's prompt");
    let events = events(&output);
    let notice = events
        .iter()
        .find(|e| e["type"] == "notice" && e["message"].as_str().unwrap().contains("sampling"))
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(
        notice["message"]
            .as_str()
            .unwrap()
            .contains("set \"sampling\": \"allow\""),
        "the refusal names the fix: {notice}"
    );
}

#[test]
fn elicitation_is_declined_without_a_terminal_and_filled_in_with_one() {
    let dir = workdir("elicitation");
    let everything = everything_stdio();
    let declined = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "call",
            "everything",
            "trigger-elicitation-request",
        ],
    );
    assert!(
        text(&declined.stdout).contains("\"action\": \"decline\""),
        "{}",
        text(&declined.stdout)
    );

    // In a pseudo-terminal, over each transport: accept, type the required name, agree, and
    // press Enter for every other field so the schema's defaults apply.
    let mut answers = String::from("y\nAda Lovelace\nyes\n");
    answers.push_str(&"\n".repeat(11));
    for via in Via::all() {
        let config = everything_config_via(&dir, &via, json!({}));
        let (code, screen) = in_terminal(
            &dir,
            &format!(
                "--config {} call everything trigger-elicitation-request",
                config.display()
            ),
            &answers,
        );
        assert_eq!(code, Some(0), "{}: {screen}", via.name());
        filled_form(&screen);
    }

    // Titled choices are shown by title and picked by title, number or id.
    let mut answers = String::from("y\nAda Lovelace\nyes\n");
    answers.push_str(&"\n".repeat(8));
    answers.push_str("wonder woman\nTuna, 3\nDogs\n");
    let (code, screen) = in_terminal(
        &dir,
        &format!("--stdio '{everything}' call everything trigger-elicitation-request"),
        &answers,
    );
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("one of: 1 Superman, 2 Green Lantern, 3 Wonder Woman [Superman]"),
        "{screen}"
    );
    for expected in [
        "\"titledSingleSelectEnum\": \"hero-3\"",
        "\"fish-1\"",
        "\"fish-3\"",
        "\"legacyTitledEnum\": \"pet-2\"",
    ] {
        assert!(screen.contains(expected), "missing {expected}:\n{screen}");
    }
}

/// Checks the everything server's report of the form filled in with defaults.
fn filled_form(screen: &str) {
    assert!(
        screen.contains("server \"everything\" asks: Please provide inputs"),
        "{screen}"
    );
    for expected in [
        "- Name: Ada Lovelace",
        "- Agreed to terms: true",
        "\"firstLine\": \"It was a dark and stormy night.\"",
        "\"integer\": 42",
        "\"untitledMultipleSelectEnum\": [",
        "\"titledSingleSelectEnum\": \"hero-1\"",
    ] {
        assert!(screen.contains(expected), "missing {expected}:\n{screen}");
    }
}

/// Runs `tether ARGS` in a pseudo-terminal (util-linux `script`) with `input` typed in, and
/// returns its exit code and everything it showed.
fn in_terminal(dir: &Path, args: &str, input: &str) -> (Option<i32>, String) {
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_tether"));
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(dir)
        .env("TETHER_DATA_DIR", dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux is installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (output.status.code(), text(&output.stdout))
}

#[test]
fn url_elicitation_is_shown_never_opened_and_sampling_asks_twice_in_a_terminal() {
    let dir = workdir("terminal-consent");
    let everything = everything_stdio();
    let (code, screen) = in_terminal(
        &dir,
        &format!(
            "--stdio '{everything}' call everything trigger-url-elicitation url=https://example.com/connect message=Connect elicitationId=e1"
        ),
        "y\n",
    );
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("asks you to visit a URL: Connect"),
        "{screen}"
    );
    assert!(screen.contains("https://example.com/connect"));
    assert!(screen.contains("Tether does not open it"));
    assert!(screen.contains("accept"), "{screen}");

    // Sampling with the default policy ("ask"): the request is shown and approved, then the
    // draft answer is shown and approved.
    let config = everything_config(&dir, json!({}));
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call(
                "c1",
                "everything__trigger-sampling-request",
                r#"{"prompt": "Name a colour", "maxTokens": 10}"#,
            ),
            Reply::text("Teal"),
            Reply::text("The server got: Teal"),
        ],
    );
    let (code, screen) = in_terminal(
        &dir,
        &format!(
            "--config {} run --approve auto --model openai:scripted --base-url {} 'sample please'",
            config.display(),
            model.base_url()
        ),
        "y\ny\n",
    );
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("server \"everything\" asks to use the model"),
        "{screen}"
    );
    assert!(screen.contains("Name a colour"));
    assert!(screen.contains("draft answer for \"everything\""));
    assert!(screen.contains("Teal"));
    assert!(screen.contains("The server got: Teal"));
    assert_eq!(model.requests().len(), 3);
}

#[test]
fn a_modern_server_asks_for_roots_in_a_multi_round_trip_call() {
    let server = HttpServer::modern();
    let dir = workdir("mrtr");
    let url = format!("modern={}", server.url);
    let output = tether(
        &dir,
        &[
            "--url",
            &url,
            "--root",
            "/srv/beta",
            "call",
            "modern",
            "where",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("roots: file:///srv/beta"),
        "{}",
        text(&output.stdout)
    );
}

/// A config with the fixture server in `mode`, logging cancellations to `dir/cancelled`.
fn fixture_config(dir: &Path, mode: &str) -> PathBuf {
    let path = dir.join("tether.json");
    let server = json!({
        "command": "python3",
        "args": [fixture("misbehaving_server.py"), mode],
        "env": {"CANCEL_LOG": dir.join("cancelled")},
    });
    std::fs::write(
        &path,
        json!({"mcpServers": {"fixture": server}}).to_string(),
    )
    .unwrap();
    path
}

#[test]
fn a_list_change_reaches_the_next_model_request() {
    let dir = workdir("list-changed");
    let config = fixture_config(&dir, "grows");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "fixture__boom", "{}"),
            Reply::text("done"),
        ],
    );
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "--json",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "go",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let tool_names = |i: usize| -> Vec<String> {
        model.requests()[i].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(!tool_names(0).contains(&"fixture__grown_tool".to_string()));
    assert!(
        tool_names(1).contains(&"fixture__grown_tool".to_string()),
        "{:?}",
        tool_names(1)
    );
}

#[test]
fn a_timed_out_call_is_cancelled_on_the_server() {
    let dir = workdir("cancel");
    let config = fixture_config(&dir, "hang-on-call");
    let output = tether(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "--timeout",
            "1",
            "call",
            "fixture",
            "boom",
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("timed out after 1s"));
    let log = std::fs::read_to_string(dir.join("cancelled")).expect("the server was told");
    let cancelled: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert!(cancelled["requestId"].is_number(), "{cancelled}");
    // The server is told the real reason, not that a user cancelled.
    assert_eq!(
        cancelled["reason"], "timed out after 1s (the client's limit)",
        "{cancelled}"
    );
}

#[test]
fn ctrl_c_during_a_call_cancels_it_on_the_server() {
    use std::io::{BufRead, BufReader};
    let dir = workdir("ctrl-c");
    let config = fixture_config(&dir, "hang-on-call");
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::call("c1", "fixture__boom", "{}")]);
    let base = model.base_url();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "run",
            "--json",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "wait",
        ])
        .current_dir(&dir)
        .env("TETHER_DATA_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("\"tool_call_started\""));
    assert!(started.is_some());
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let log = std::fs::read_to_string(dir.join("cancelled")).expect("the server was told");
    assert!(log.contains("requestId"), "{log}");
    assert!(log.contains("cancelled by the user"), "{log}");
}

#[test]
fn a_mentioned_resource_is_attached_watched_and_re_read_when_it_changes() {
    for via in [Via::Stdio, Via::Sse(HttpServer::everything_sse())] {
        let dir = workdir(&format!("resources-{}", via.name().replace(' ', "-")));
        let config = everything_config_via(&dir, &via, json!({}));
        let model = ScriptedModel::start(
            Wire::OpenAi,
            vec![
                Reply::call("c1", "everything__toggle-subscriber-updates", "{}"),
                Reply::text("I will keep an eye on it."),
            ],
        );
        let base = model.base_url();
        let uri = "demo://resource/static/document/architecture.md";
        let output = tether(
            &dir,
            &[
                "--config",
                config.to_str().unwrap(),
                "run",
                "--json",
                "--approve",
                "auto",
                "--model",
                "openai:scripted",
                "--base-url",
                &base,
                &format!("Watch @everything:{uri} for me."),
            ],
        );
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        let requests = model.requests();
        let first = requests[0].body["messages"].to_string();
        assert!(
            first.contains(&format!(
                r#"<resource server=\"everything\" uri=\"{uri}\">"#
            )),
            "{}: the resource is attached: {first}",
            via.name()
        );
        assert!(first.contains("# Everything Server"), "{first}");
        // Turning updates on makes the server report the subscribed resource changed; the
        // next model request carries it re-read.
        let second = requests[1].body["messages"].as_array().unwrap();
        let update = second.last().unwrap();
        assert_eq!(update["role"], "user");
        let update = update["content"].as_str().unwrap();
        assert!(
            update.starts_with(&format!(
                "[update] The resource {uri} on server \"everything\" changed."
            )),
            "{}: {update}",
            via.name()
        );
        assert!(update.contains("# Everything Server"));
    }
}

#[test]
fn an_unknown_mentioned_resource_is_a_clear_error() {
    let dir = workdir("resource-missing");
    let everything = everything_stdio();
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("unused")]);
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "run",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "Read @everything:demo://nothing/here please",
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("server \"everything\"") && stderr.contains("demo://nothing/here"),
        "{stderr}"
    );
    assert!(model.requests().is_empty(), "nothing was sent to the model");
}

#[test]
fn completion_and_prompts_in_chat() {
    let dir = workdir("completion");
    let everything = everything_stdio();
    let completed = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "complete",
            "everything",
            "--prompt",
            "completable-prompt",
            "department",
            "Eng",
        ],
    );
    assert_eq!(text(&completed.stdout).trim(), "Engineering");
    let template = tether(
        &dir,
        &[
            "--stdio",
            &everything,
            "--json",
            "complete",
            "everything",
            "--template",
            "demo://resource/dynamic/text/{resourceId}",
            "resourceId",
            "1",
        ],
    );
    let values: Value = serde_json::from_slice(&template.stdout).unwrap();
    assert!(values.as_array().unwrap().contains(&json!("1")), "{values}");

    // `/prompt` in chat expands the server's prompt into the conversation and answers it.
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("Paris is lovely.")]);
    let base = model.base_url();
    let mut child = spawn_in(
        &dir,
        &[
            "--stdio",
            &everything,
            "chat",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
        ],
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"/prompt everything nope\n/prompt everything args-prompt city=Paris\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("unknown prompt \"nope\""),
        "a typo is reported and the chat goes on: {stderr}"
    );
    assert!(text(&output.stdout).contains("Paris is lovely."));
    let request = &model.requests()[0].body;
    let user = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap();
    assert!(
        user["content"].as_str().unwrap().contains("Paris"),
        "{user}"
    );
}

#[test]
fn a_restarted_http_server_gets_a_new_session_transparently() {
    use std::io::{BufRead, BufReader};
    // The Python SDK server, held to the 2025-11-25 era, which has sessions; restarting it
    // forgets them, and it answers the old session id with 404 as the spec says.
    let server = HttpServer::modern();
    let port = server.port();
    let dir = workdir("session-expiry");
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"py": {"url": server.url, "protocolVersion": "2025-11-25"}}})
            .to_string(),
    )
    .unwrap();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "py__add", r#"{"a": 1, "b": 2}"#),
            Reply::text("first answer"),
            Reply::call("c2", "py__add", r#"{"a": 3, "b": 4}"#),
            Reply::text("second answer"),
        ],
    );
    let base = model.base_url();
    let mut child = spawn_in(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "--timeout",
            "20",
            "chat",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
        ],
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    stdin.write_all(b"add one and two\n").unwrap();
    let first = stdout
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("first answer"));
    assert!(first.is_some());
    drop(server);
    let _restarted = HttpServer::modern_on(port);
    stdin.write_all(b"add three and four\n").unwrap();
    drop(stdin);
    let rest: Vec<String> = stdout.map_while(Result::ok).collect();
    let output = child.wait_with_output().unwrap();
    assert!(
        rest.iter().any(|l| l.contains("second answer")),
        "{rest:?}\n{}",
        text(&output.stderr)
    );
    let tool_result = model.requests()[3].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(
        tool_result["content"], "7",
        "the call after the restart reached the new server"
    );
}

#[test]
fn in_a_terminal_a_long_call_shows_a_live_progress_bar_and_ctrl_c_stops_it() {
    use std::io::Read;
    let dir = workdir("terminal-progress");
    let everything = everything_stdio();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![Reply::call(
            "c1",
            "everything__trigger-long-running-operation",
            r#"{"duration": 60, "steps": 60}"#,
        )],
    );
    let command = format!(
        "{} --stdio '{everything}' run --approve auto --model openai:scripted --base-url {} 'run the long operation'",
        env!("CARGO_BIN_EXE_tether"),
        model.base_url()
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(&dir)
        .env("TETHER_DATA_DIR", &dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) from util-linux is installed");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // Read the screen until the bar has moved twice, redrawn in place.
    let mut screen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&screen).contains("(2/60)") {
        let read = stdout.read(&mut buffer).unwrap();
        assert!(read > 0, "{}", String::from_utf8_lossy(&screen));
        screen.extend_from_slice(&buffer[..read]);
    }
    let started = std::time::Instant::now();
    // Ctrl-C, typed: the terminal turns it into SIGINT for Tether.
    stdin.write_all(b"\x03").unwrap();
    stdout.read_to_end(&mut screen).unwrap();
    let status = child.wait().unwrap();
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen.contains("\r\x1b[2Keverything__trigger-long-running-operation [")
            && screen.contains("(1/60)"),
        "the bar is redrawn in place: {screen:?}"
    );
    assert!(
        screen.contains("(2/60)^C\r\x1b[2Kerror: cancelled"),
        "the bar is cleared before the message: {screen:?}"
    );
    assert_eq!(status.code(), Some(130));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn a_root_added_in_chat_is_announced_and_the_server_asks_again() {
    use std::io::{BufRead, BufReader};
    let dir = workdir("roots-changed");
    let everything = everything_stdio();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__get-roots-list", "{}"),
            Reply::text("Two roots."),
        ],
    );
    let base = model.base_url();
    let mut child = spawn_in(
        &dir,
        &[
            "--stdio",
            &everything,
            "chat",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
        ],
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    stdin.write_all(b"/root /srv/gamma\n").unwrap();
    // The server logs when it has fetched the roots again: wait for that, not for a time.
    let refreshed = stderr
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("Roots updated: 1 root(s)"));
    assert!(refreshed.is_some());
    stdin.write_all(b"which roots do you see?\n").unwrap();
    drop(stdin);
    let _rest: Vec<String> = stderr.map_while(Result::ok).collect();
    child.wait().unwrap();
    let tool = model.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    let content = tool["content"].as_str().unwrap();
    assert!(content.contains("file:///srv/gamma"), "{content}");
    assert!(
        !content.contains(&format!("file://{}", dir.display())),
        "only the root asked for: {content}"
    );
}

#[test]
fn a_modern_server_elicits_and_samples_with_tools_in_multi_round_trip_calls() {
    let server = HttpServer::modern();
    let dir = workdir("mrtr-elicit-sample");
    let url = format!("modern={}", server.url);
    let declined = tether(&dir, &["--url", &url, "call", "modern", "greet"]);
    assert!(
        text(&declined.stdout).contains("no name: decline"),
        "{}",
        text(&declined.stdout)
    );
    let (code, screen) = in_terminal(
        &dir,
        &format!("--url {url} call modern greet"),
        "y\nGrace\n",
    );
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("What is your name?"), "{screen}");
    assert!(screen.contains("Hello, Grace!"), "{screen}");

    // Sampling with tools: the server offers the model a tool inside its sampling request,
    // and the model's tool use goes back to the server as a `tool_use` block.
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"modern": {"url": server.url, "sampling": "allow"}}}).to_string(),
    )
    .unwrap();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "modern__forecast", r#"{"city": "Paris"}"#),
            Reply::call("s1", "get_weather", r#"{"city": "Paris"}"#),
            Reply::text("The server saw the tool use."),
        ],
    );
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "forecast for Paris",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let requests = model.requests();
    let sampling = &requests[1].body;
    assert_eq!(sampling["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(sampling["messages"][0]["content"], "Weather in Paris?");
    let tool = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("tool_use get_weather {'city': 'Paris'}"),
        "{tool}"
    );
}

#[test]
fn a_modern_server_gets_the_log_level_per_request_and_updates_on_a_listen_stream() {
    let server = HttpServer::modern();
    let dir = workdir("modern-listen");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "modern__bump", "{}"),
            Reply::text("It went up."),
        ],
    );
    let url = format!("modern={}", server.url);
    let base = model.base_url();
    let output = tether(
        &dir,
        &[
            "--url",
            &url,
            "run",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "Watch @modern:note://counter and bump it.",
        ],
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    // A 2026-07-28 server only logs to clients that send a level with the request.
    assert!(
        stderr.contains("[modern] info: bumped the counter"),
        "{stderr}"
    );
    let requests = model.requests();
    assert!(
        requests[0].body["messages"]
            .to_string()
            .contains("count: 0"),
        "the resource is attached"
    );
    let update = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        update.starts_with("[update] The resource note://counter on server \"modern\" changed.")
            && update.contains("count: 1"),
        "{update}"
    );
}
