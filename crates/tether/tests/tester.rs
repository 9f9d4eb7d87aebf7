//! End-to-end tests of the tester commands: the real `tether` binary against real MCP servers
//! (server-everything over stdio and Streamable HTTP, modern-era Python servers) and against
//! misbehaving fixture servers. Each bad-input case asserts on the one-line error it prints.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{HttpServer, everything_stdio, misbehaving_stdio, sqlite_stdio, time_stdio};

/// Nothing the tester does should take this long; a hang fails the test instead of CI.
const DEADLINE: Duration = Duration::from_secs(90);

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The `error:` lines on stderr; every failure must produce exactly one.
    fn error_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect()
    }

    fn only_error(&self) -> &str {
        let lines = self.error_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one error line, stderr was:\n{}",
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        lines[0]
    }
}

fn tether_in(dir: &Path, args: &[&str]) -> Run {
    let mut child = test_support::own_data_dir(&mut Command::new(env!("CARGO_BIN_EXE_tether")))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tether binary starts");
    let mut stdout_pipe = child.stdout.take().expect("piped");
    let mut stderr_pipe = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait works") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("tether {args:?} hung for more than {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: out_reader.join().expect("reader"),
        stderr: err_reader.join().expect("reader"),
    }
}

fn tether(args: &[&str]) -> Run {
    // An empty directory, so no ./.tether.json is picked up by accident.
    let dir = tempdir();
    tether_in(&dir, args)
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tether-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(run: &Run) {
    assert_eq!(
        run.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

#[test]
fn tools_over_stdio_lists_qualified_names_titles_and_hints() {
    let everything = everything_stdio();
    let run = tether(&["tools", "--stdio", &everything]);
    ok(&run);
    assert!(
        run.stdout.contains("everything__get-sum  (Get Sum Tool)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Returns the sum of two numbers"));
    assert!(run.stdout.contains("hints: read-only"));
}

#[test]
fn tools_schema_and_json_output() {
    let everything = everything_stdio();
    let run = tether(&["tools", "--schema", "--stdio", &everything]);
    ok(&run);
    assert!(run.stdout.contains("input schema:"));
    assert!(
        run.stdout.contains("output schema:"),
        "get-structured-content has one"
    );

    let run = tether(&["tools", "--json", "--stdio", &everything]);
    ok(&run);
    let tools: Value = serde_json::from_str(&run.stdout).unwrap();
    let sum = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "get-sum")
        .unwrap();
    assert_eq!(sum["qualifiedName"], "everything__get-sum");
    assert_eq!(sum["server"], "everything");
    assert_eq!(sum["inputSchema"]["properties"]["a"]["type"], "number");
}

#[test]
fn call_get_sum_over_stdio_with_pairs_and_json() {
    let everything = everything_stdio();
    let run = tether(&[
        "call",
        "everything",
        "get-sum",
        "a=2",
        "b=3",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    assert_eq!(run.stdout.trim(), "The sum of 2 and 3 is 5.");

    let run = tether(&[
        "call",
        "everything",
        "get-sum",
        r#"{"a": 20, "b": 22}"#,
        "--stdio",
        &everything,
        "--json",
    ]);
    ok(&run);
    let result: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(result["content"][0]["text"], "The sum of 20 and 22 is 42.");
    assert_eq!(result["isError"], false);
}

#[test]
fn call_prints_images_structured_content_links_and_embedded_resources() {
    let everything = everything_stdio();
    let run = tether(&[
        "call",
        "everything",
        "get-tiny-image",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("[image image/png"))
        .expect("image note");
    let path = line
        .split("saved to ")
        .nth(1)
        .unwrap()
        .trim_end_matches(']');
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[1..4], b"PNG", "the saved file is the decoded image");

    let run = tether(&[
        "call",
        "everything",
        "get-structured-content",
        "location=Chicago",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    // The text block already carries the structured content, so it is printed once.
    assert_eq!(
        run.stdout.matches("\"temperature\"").count(),
        1,
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("structuredContent:"), "{}", run.stdout);

    let run = tether(&[
        "call",
        "everything",
        "get-resource-links",
        "count=2",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    assert_eq!(
        run.stdout.matches("[resource link] demo://").count(),
        2,
        "{}",
        run.stdout
    );

    let run = tether(&[
        "call",
        "everything",
        "get-resource-reference",
        "resourceType=Text",
        "resourceId=3",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    assert!(
        run.stdout
            .contains("[resource demo://resource/dynamic/text/3"),
        "{}",
        run.stdout
    );
}

#[test]
fn resources_templates_read_and_prompts_over_stdio() {
    let everything = everything_stdio();
    let run = tether(&["resources", "--stdio", &everything]);
    ok(&run);
    assert!(
        run.stdout
            .contains("demo://resource/static/document/architecture.md")
    );
    assert!(
        run.stdout
            .contains("demo://resource/dynamic/text/{resourceId}")
    );
    assert!(run.stdout.contains("[template]"));

    let run = tether(&[
        "read",
        "everything",
        "demo://resource/static/document/architecture.md",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    assert!(
        run.stdout.starts_with(
            "[resource demo://resource/static/document/architecture.md (text/markdown)]"
        )
    );

    let run = tether(&[
        "read",
        "everything",
        "demo://resource/dynamic/blob/1",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    assert!(run.stdout.contains("[blob "), "{}", run.stdout);

    let run = tether(&["prompts", "--stdio", &everything]);
    ok(&run);
    assert!(
        run.stdout.contains("args-prompt [city* state]"),
        "{}",
        run.stdout
    );

    let run = tether(&[
        "prompt",
        "everything",
        "args-prompt",
        "city=Paris",
        "--stdio",
        &everything,
    ]);
    ok(&run);
    assert!(
        run.stdout.contains("[user]\nWhat's weather in Paris?"),
        "{}",
        run.stdout
    );
}

/// A legacy server is reached through `initialize` at 2025-11-25 whatever it answers our
/// 2026-07-28 probe (`server/discover`), as long as the answer is not a modern success: an
/// unsupported-version error listing only legacy versions or none, an exit, HTTP 400, 404 or
/// 405, a plain-text body. rmcp itself falls back only on a JSON-RPC error naming no versions.
#[test]
fn a_legacy_server_is_reached_whatever_it_answers_the_modern_probe() {
    let check = |what: &str, run: &Run| {
        assert_eq!(run.code, 0, "{what}: {}", run.stderr);
        let rows: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}", run.stdout));
        assert_eq!(rows[0]["status"], "connected", "{what}: {rows}");
        assert_eq!(rows[0]["protocolVersion"], "2025-11-25", "{what}: {rows}");
        assert_eq!(rows[0]["era"], "legacy", "{what}: {rows}");
    };
    for mode in ["discover-versions", "discover-no-list", "discover-exit"] {
        let server = format!("legacy={}", misbehaving_stdio(mode));
        let run = tether(&["servers", "--json", "--stdio", &server]);
        check(mode, &run);
        let run = tether(&["call", "legacy", "boom", "--stdio", &server]);
        assert_eq!(run.code, 0, "{mode}: {}", run.stderr);
        assert_eq!(run.stdout.trim(), "ok", "{mode}");
    }
    for mode in ["http-400", "http-404", "http-405", "plain-text", "versions"] {
        let server = HttpServer::legacy(mode);
        let url = format!("legacy={}", server.url);
        let run = tether(&["servers", "--json", "--url", &url]);
        check(mode, &run);
        let run = tether(&["call", "legacy", "ping", "--url", &url]);
        assert_eq!(run.code, 0, "{mode}: {}", run.stderr);
        assert_eq!(run.stdout.trim(), "pong", "{mode}");
    }
}

/// The Rust `mcp-proxy` 0.6.0 (a peer nobody here wrote; tower-mcp speaks 2025-11-25 and
/// older) answers the 2026-07-28 probe with an error listing its versions: Tether falls back to
/// `initialize` at 2025-11-25 with no version pinned in the config, lists the proxied tools and
/// calls one (before the fallback: "no compatible protocol version").
#[test]
fn the_rust_mcp_proxy_is_reached_without_pinning_a_version() {
    let proxy =
        HttpServer::rust_mcp_proxy(Path::new(env!("CARGO_BIN_EXE_tether")), &["builtin-server"]);
    let url = format!("proxy={}", proxy.url);
    let run = tether(&["servers", "--json", "--url", &url]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    assert_eq!(rows[0]["status"], "connected", "{rows}");
    assert_eq!(rows[0]["protocolVersion"], "2025-11-25", "{rows}");
    let run = tether(&["call", "proxy", "b/add", "a=2", "b=40", "--url", &url]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "42");
}

#[test]
fn streamable_http_server_everything() {
    let server = HttpServer::everything();
    let url = format!("everything={}", server.url);
    let run = tether(&["call", "everything", "get-sum", "a=2", "b=3", "--url", &url]);
    ok(&run);
    assert_eq!(run.stdout.trim(), "The sum of 2 and 3 is 5.");

    let run = tether(&["servers", "--json", "--url", &url]);
    ok(&run);
    let rows: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(rows[0]["status"], "connected");
    assert_eq!(rows[0]["protocolVersion"], "2025-11-25");
    assert_eq!(rows[0]["era"], "legacy");
    assert!(rows[0]["tools"].as_u64().unwrap() >= 10);
    assert_eq!(rows[0]["resourceTemplates"], 2);

    let run = tether(&["call", "everything", "get-tiny-image", "--url", &url]);
    ok(&run);
    assert!(run.stdout.contains("[image image/png"));

    let run = tether(&["prompt", "everything", "simple-prompt", "--url", &url]);
    ok(&run);
    assert!(run.stdout.contains("[user]"));

    let run = tether(&[
        "read",
        "everything",
        "demo://resource/dynamic/text/7",
        "--url",
        &url,
    ]);
    ok(&run);
    assert!(run.stdout.contains("demo://resource/dynamic/text/7"));
}

#[test]
fn modern_era_over_stdio() {
    let time = time_stdio();
    let run = tether(&["servers", "--json", "--stdio", &time]);
    ok(&run);
    let rows: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(rows[0]["name"], "time");
    assert_eq!(rows[0]["protocolVersion"], "2026-07-28");
    assert_eq!(rows[0]["era"], "modern");

    let run = tether(&[
        "call",
        "time",
        "get_current_time",
        "timezone=Asia/Tokyo",
        "--stdio",
        &time,
    ]);
    ok(&run);
    assert!(
        run.stdout.contains("\"timezone\": \"Asia/Tokyo\""),
        "{}",
        run.stdout
    );
}

#[test]
fn modern_era_over_streamable_http() {
    let server = HttpServer::modern();
    let url = format!("modern={}", server.url);
    let run = tether(&["servers", "--json", "--url", &url]);
    ok(&run);
    let rows: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(rows[0]["protocolVersion"], "2026-07-28");
    assert_eq!(rows[0]["tools"], 7);

    let run = tether(&[
        "call", "modern", "add", "a=2", "b=40", "--url", &url, "--json",
    ]);
    ok(&run);
    let result: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(result["structuredContent"]["result"], 42);
}

#[test]
fn config_file_runs_servers_in_parallel_and_reports_each() {
    let dir = tempdir();
    let config = serde_json::json!({
        "mcpServers": {
            "everything": {"command": test_support::npm_bin("mcp-server-everything"), "args": ["stdio"]},
            "time": {"command": test_support::venv_bin("mcp-server-time"), "args": ["--local-timezone", "UTC"]},
            "broken": {"command": "python3", "args": [test_support::fixture("misbehaving_server.py"), "exit"]},
            "off": {"command": "does-not-matter", "disabled": true}
        }
    });
    std::fs::write(dir.join(".tether.json"), config.to_string()).unwrap();
    let run = tether_in(&dir, &["servers"]);
    assert_eq!(
        run.code, 2,
        "a failed server makes the exit code 2:\n{}",
        run.stderr
    );
    let line = |name: &str| {
        run.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("everything").contains("connected  2025-11-25"),
        "{}",
        run.stdout
    );
    assert!(
        line("time").contains("connected  2026-07-28"),
        "{}",
        run.stdout
    );
    assert!(line("broken").contains("failed"), "{}", run.stdout);
    assert!(line("off").contains("disabled"), "{}", run.stdout);
    assert!(run.stdout.contains(
        "error: server \"broken\": failed during startup: the server exited with status 3"
    ));

    // The working servers keep working next to the broken one.
    let run = tether_in(&dir, &["tools"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stdout.contains("everything__get-sum") && run.stdout.contains("time__get_current_time")
    );
    assert!(run.only_error().contains("server \"broken\""));

    let run = tether_in(&dir, &["call", "everything", "get-sum", "a=1", "b=1"]);
    ok(&run);
}

#[test]
fn stdio_servers_get_an_explicit_environment() {
    let dir = tempdir();
    let config = serde_json::json!({"mcpServers": {"everything": {
        "command": test_support::npm_bin("mcp-server-everything"),
        "args": ["stdio"],
        "env": {"GIVEN_TO_SERVER": "${TETHER_TEST_VALUE:-fallback}"}
    }}});
    std::fs::write(dir.join("custom.json"), config.to_string()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
    test_support::own_data_dir(&mut command);
    let output = command
        .args(["call", "everything", "get-env", "--config", "custom.json"])
        .current_dir(&dir)
        .env("SECRET_API_KEY", "must-not-leak")
        .env("TETHER_TEST_VALUE", "substituted")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("\"GIVEN_TO_SERVER\": \"substituted\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"PATH\""), "PATH is inherited");
    assert!(
        !stdout.contains("must-not-leak"),
        "other variables are not inherited"
    );
}

#[test]
fn pagination_is_followed_and_children_are_reaped() {
    let dir = tempdir();
    let pidfile = dir.join("server.pid");
    let server = format!("{} {}", misbehaving_stdio("working"), pidfile.display());
    let run = tether(&["tools", "--stdio", &server]);
    ok(&run);
    assert!(run.stdout.contains("__boom"));
    assert!(
        run.stdout.contains("__second_page_tool"),
        "second page listed: {}",
        run.stdout
    );
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    // Reaped, not a zombie: /proc/PID is gone once tether has exited.
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "server process {pid} outlived tether"
    );
}

// ---- bad input: each case exits non-zero with one clear line ----

#[test]
fn malformed_config_names_file_line_and_key() {
    let dir = tempdir();
    std::fs::write(
        dir.join(".tether.json"),
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}\n",
    )
    .unwrap();
    let run = tether_in(&dir, &["servers"]);
    assert_eq!(run.code, 1);
    let line = run.only_error();
    assert!(line.starts_with("error: config .tether.json:3:"), "{line}");

    std::fs::write(
        dir.join(".tether.json"),
        r#"{"mcpServers": {"a": {"command": "x", "args": "-y pkg"}}}"#,
    )
    .unwrap();
    let run = tether_in(&dir, &["servers"]);
    assert_eq!(run.code, 1);
    let line = run.only_error();
    assert!(
        line.contains("mcpServers.a.args") && line.contains("expected a sequence"),
        "{line}"
    );

    let run = tether_in(&dir, &["servers", "--config", "missing.json"]);
    assert_eq!(run.code, 1);
    assert!(
        run.only_error()
            .contains("config missing.json: cannot read the file")
    );
}

#[test]
fn unknown_server_and_tool_list_near_matches() {
    let everything = everything_stdio();
    let run = tether(&["call", "everythin", "get-sum", "--stdio", &everything]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.only_error(),
        "error: unknown server \"everythin\"; did you mean \"everything\"?"
    );

    let run = tether(&[
        "call",
        "everything",
        "get_sum",
        "a=1",
        "--stdio",
        &everything,
    ]);
    assert_eq!(run.code, 1);
    assert!(run.only_error().starts_with(
        "error: server \"everything\": unknown tool \"get_sum\"; did you mean \"get-sum\""
    ));
}

#[test]
fn typos_unknown_and_repeated_arguments_and_disabled_tools_are_named() {
    let everything = everything_stdio();
    let call = |args: &[&str]| {
        let mut all = vec!["call", "everything"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--stdio", &everything]);
        tether(&all)
    };
    let run = call(&["ecoh", "message=hi"]);
    assert_eq!(run.code, 1);
    assert!(
        run.only_error().contains("did you mean \"echo\"?"),
        "{}",
        run.stderr
    );
    let run = call(&["echo", "message=hi", "c=3"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.only_error(),
        "error: server \"everything\": tool \"echo\": no parameter \"c\"; it takes: message"
    );
    let run = call(&["echo", "message=hi", "message=ho"]);
    assert_eq!(run.code, 1);
    assert!(run.only_error().contains("\"message\" is given twice"));
    // Prompt arguments are checked against what the prompt declares.
    let run = tether(&[
        "prompt",
        "everything",
        "args-prompt",
        "cty=Oslo",
        "--stdio",
        &everything,
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.only_error()
            .contains("no parameter \"cty\" (did you mean \"city\"?)"),
        "{}",
        run.stderr
    );
    let run = tether(&[
        "prompt",
        "everything",
        "args-prompt",
        "--stdio",
        &everything,
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.only_error()
            .contains("missing required argument \"city\"; add city=…"),
        "{}",
        run.stderr
    );
    // A tool the config filters out is "disabled in the config", not unknown.
    let dir = tempdir();
    let config = dir.join("config.json");
    let command = test_support::npm_bin("mcp-server-everything");
    std::fs::write(
        &config,
        serde_json::json!({"mcpServers": {"everything": {"command": command, "args": ["stdio"],
            "disabledTools": ["echo"]}}})
        .to_string(),
    )
    .unwrap();
    let run = tether_in(
        &dir,
        &[
            "call",
            "everything",
            "echo",
            "message=hi",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 1);
    assert!(
        run.only_error()
            .contains("tool \"echo\" is disabled in the config"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_list_the_server_does_not_implement_is_empty_not_a_failure() {
    // mcp-server-sqlite declares resources but answers "Method not found" to
    // resources/templates/list, and declares no completions.
    let dir = tempdir();
    let sqlite = sqlite_stdio(&dir.join("test.db"));
    let run = tether_in(&dir, &["servers", "--stdio", &sqlite]);
    ok(&run);
    assert!(run.stdout.contains("1+0t"), "{}", run.stdout);
    let run = tether_in(&dir, &["servers", "--json", "--stdio", &sqlite]);
    ok(&run);
    let run = tether_in(&dir, &["resources", "sqlite", "--stdio", &sqlite]);
    ok(&run);
    assert!(run.stdout.contains("memo://insights"), "{}", run.stdout);
    let run = tether_in(
        &dir,
        &[
            "complete", "sqlite", "--prompt", "mcp-demo", "topic", "", "--stdio", &sqlite,
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.only_error(),
        "error: server \"sqlite\" does not offer completion (it declares no \"completions\" capability)"
    );
}

#[test]
fn a_refused_connection_and_a_missing_api_key_are_said_in_words() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let run = tether(&["tools", "--url", &url]);
    assert_eq!(run.code, 2);
    let line = run.only_error();
    assert!(
        line.contains(&format!(
            "connection refused: nothing listens on 127.0.0.1:{port}"
        )),
        "{line}"
    );
    assert!(!line.contains("::"), "no Rust type names: {line}");
    // A hosted model without its key fails at once and names the variable, instead of
    // retrying the network.
    let started = Instant::now();
    let output = test_support::own_data_dir(&mut Command::new(env!("CARGO_BIN_EXE_tether")))
        .args(["run", "--model", "openai:gpt-4o-mini", "hello"])
        .current_dir(tempdir())
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("needs an API key: set OPENAI_API_KEY"),
        "{stderr}"
    );
    assert!(!stderr.contains("retrying"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn under_json_errors_are_json_too() {
    let everything = everything_stdio();
    let run = tether(&[
        "servers",
        "--json",
        "--stdio",
        &everything,
        "--stdio",
        "broken=/nonexistent/server",
    ]);
    assert_eq!(run.code, 2);
    let rows: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    let lines: Vec<Value> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().expect("a JSON error line");
    assert_eq!(last["error"]["exitCode"], 2, "{}", run.stderr);
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("1 of 2 servers failed"), "{message}");
    assert!(!message.contains("table"), "{message}");
    assert!(!run.stderr.contains("error: "), "{}", run.stderr);
}

#[test]
fn complete_passes_earlier_arguments_as_context() {
    let everything = everything_stdio();
    let complete = |extra: &[&str]| {
        let mut args = vec![
            "complete",
            "everything",
            "--prompt",
            "completable-prompt",
            "name",
            "",
            "--stdio",
            &everything,
        ];
        args.extend_from_slice(extra);
        tether(&args)
    };
    let run = complete(&["--context", "department=Engineering"]);
    ok(&run);
    assert_eq!(
        run.stdout.lines().collect::<Vec<_>>(),
        ["Alice", "Bob", "Charlie"]
    );
    let run = complete(&["--context", "department=Sales"]);
    ok(&run);
    assert_eq!(
        run.stdout.lines().collect::<Vec<_>>(),
        ["David", "Eve", "Frank"]
    );
    let run = complete(&["--context", "department"]);
    assert_eq!(run.code, 1);
    assert!(run.only_error().contains("is not NAME=VALUE"));
}

#[test]
fn invalid_json_arguments_are_a_usage_error() {
    let everything = everything_stdio();
    let run = tether(&[
        "call",
        "everything",
        "get-sum",
        r#"{"a": 2,"#,
        "--stdio",
        &everything,
    ]);
    assert_eq!(run.code, 1);
    let line = run.only_error();
    assert!(
        line.contains("tool \"get-sum\": arguments are not valid JSON"),
        "{line}"
    );

    let run = tether(&[
        "call",
        "everything",
        "get-sum",
        "a=two",
        "--stdio",
        &everything,
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.only_error()
            .contains("argument a: \"two\" is not number")
    );
}

#[test]
fn server_that_exits_is_explained_with_its_stderr() {
    let run = tether(&["tools", "--stdio", &misbehaving_stdio("exit")]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.only_error(),
        "error: server \"misbehaving_server\": failed during startup: the server exited with status 3; last stderr line: fatal: cannot open database /nonexistent/db.sqlite"
    );
}

#[test]
fn server_writing_garbage_to_stdout_is_named() {
    let run = tether(&[
        "tools",
        "--timeout",
        "3",
        "--stdio",
        &misbehaving_stdio("garbage"),
    ]);
    assert_eq!(run.code, 2);
    let line = run.only_error();
    assert!(line.contains("startup timed out after 3s"), "{line}");
    assert!(
        line.contains(
            "it wrote non-JSON to stdout (1 line, first: \"Server starting up... welcome!\")"
        ),
        "{line}"
    );
}

#[test]
fn server_that_never_answers_times_out() {
    let run = tether(&[
        "servers",
        "--timeout",
        "2",
        "--stdio",
        &misbehaving_stdio("silent"),
    ]);
    assert_eq!(run.code, 2);
    assert!(
        run.stdout.contains("startup timed out after 2s"),
        "{}",
        run.stdout
    );
}

#[test]
fn server_crash_mid_call_and_hang_mid_call() {
    let run = tether(&[
        "call",
        "misbehaving_server",
        "boom",
        "--stdio",
        &misbehaving_stdio("crash-on-call"),
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.only_error(),
        "error: server \"misbehaving_server\": tool \"boom\" failed: the server exited with status 70; last stderr line: panic: simulated crash while handling tools/call"
    );

    let run = tether(&[
        "call",
        "misbehaving_server",
        "boom",
        "--timeout",
        "2",
        "--stdio",
        &misbehaving_stdio("hang-on-call"),
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.only_error(),
        "error: server \"misbehaving_server\": tool \"boom\" timed out after 2s"
    );
}

#[test]
fn tool_error_exits_3_and_shows_the_content() {
    let run = tether(&[
        "call",
        "misbehaving_server",
        "boom",
        "--stdio",
        &misbehaving_stdio("tool-error"),
    ]);
    assert_eq!(run.code, 3);
    assert_eq!(run.stdout.trim(), "disk is full");
    assert!(run.only_error().contains("returned an error (isError)"));
}

#[test]
fn missing_program_and_unreachable_url() {
    let run = tether(&["tools", "--stdio", "definitely-not-installed-mcp-server"]);
    assert_eq!(run.code, 2);
    assert!(
        run.only_error().contains(
            "cannot start `definitely-not-installed-mcp-server`: No such file or directory"
        )
    );

    // A port nothing listens on: bind, learn the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("gone=http://127.0.0.1:{port}/mcp");
    let run = tether(&["tools", "--timeout", "10", "--url", &url]);
    assert_eq!(run.code, 2);
    assert!(
        run.only_error()
            .starts_with("error: server \"gone\": cannot connect to http://127.0.0.1:"),
        "{}",
        run.stderr
    );
}

#[test]
fn usage_errors_exit_1() {
    let run = tether(&["frobnicate"]);
    assert_eq!(run.code, 1);
}

/// `tether tools | head -1`: the reader goes away early. Like ripgrep, that is a clean exit,
/// not a panic with a backtrace. The pipe's read end is closed before Tether starts, so every
/// write fails, whatever the timing.
#[test]
fn a_closed_stdout_pipe_is_a_clean_exit() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = test_support::own_data_dir(&mut Command::new(env!("CARGO_BIN_EXE_tether")))
        .args(["--stdio", &misbehaving_stdio("working"), "tools"])
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// With nothing configured, the tester shows what `run` and `chat` would use: the built-in
/// server, and says so.
#[test]
fn with_no_servers_the_tester_sees_the_builtin_tools() {
    let run = tether(&["tools"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("builtin__add"), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("no MCP servers configured, so this is the built-in server"),
        "{}",
        run.stderr
    );
    let run = tether(&["call", "builtin", "add", "a=2", "b=3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "5");
    assert!(!run.stderr.contains("note:"), "{}", run.stderr);
}

#[test]
fn a_server_limited_to_a_directory_stays_limited_unless_roots_are_given() {
    // server-filesystem replaces the directories it was started with by the client's roots.
    // Tether offers none unless asked, so the working directory (which holds a file the
    // server was not given) stays out of reach.
    let work = tempdir().join("roots-work");
    let files = work.join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(work.join("all.json"), "{\"secret\": 1}").unwrap();
    std::fs::write(files.join("notes.txt"), "milk").unwrap();
    let config = work.join("tether.json");
    std::fs::write(
        &config,
        serde_json::json!({"mcpServers": {"fs": {
            "command": test_support::npm_bin("mcp-server-filesystem"),
            "args": [&files],
        }}})
        .to_string(),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let files_dir = std::fs::canonicalize(&files).unwrap();
    let outside = std::fs::canonicalize(work.join("all.json")).unwrap();

    let allowed = tether_in(
        &work,
        &["--config", config, "call", "fs", "list_allowed_directories"],
    );
    ok(&allowed);
    assert!(
        allowed.stdout.contains(files_dir.to_str().unwrap()),
        "{}",
        allowed.stdout
    );
    let read = tether_in(
        &work,
        &[
            "--config",
            config,
            "call",
            "fs",
            "read_text_file",
            &format!("path={}", outside.display()),
        ],
    );
    assert_ne!(
        read.code, 0,
        "the file outside stays unreadable: {}",
        read.stdout
    );
    assert!(
        read.stdout.contains("Access denied"),
        "{} {}",
        read.stdout,
        read.stderr
    );

    // Asked for, roots are offered: `--root` and "roots" in the config (relative to the config
    // file). server-everything shows what it was given. (server-filesystem takes them too, but
    // fetches them in the background after the handshake, so a first call may race it.)
    let everything = test_support::npm_bin("mcp-server-everything");
    std::fs::write(
        work.join("tether.json"),
        serde_json::json!({"roots": ["files"], "mcpServers": {"e": {
            "command": everything, "args": ["stdio"],
        }}})
        .to_string(),
    )
    .unwrap();
    let offered = tether_in(&work, &["--config", config, "call", "e", "get-roots-list"]);
    ok(&offered);
    assert!(
        offered
            .stdout
            .contains(&format!("file://{}", files.display())),
        "{}",
        offered.stdout
    );
    let flagged = tether_in(
        &work,
        &[
            "--config",
            config,
            "--root",
            "/srv/other",
            "call",
            "e",
            "get-roots-list",
        ],
    );
    ok(&flagged);
    assert!(
        flagged.stdout.contains("file:///srv/other")
            && flagged
                .stdout
                .contains(&format!("file://{}", files.display())),
        "{}",
        flagged.stdout
    );
}

/// A closed standard error (`tether batch FILE 2>&1 | head -1`) loses the lines written to
/// it, never the run: no panic (exit 101), the commands still run and stdout keeps their output.
#[test]
fn a_closed_standard_error_does_not_panic() {
    let dir = tempdir().join("closed-stderr");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("steps.txt"),
        "call builtin add a=2 b=3\ncall builtin add a=4 b=5\n",
    )
    .unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = test_support::own_data_dir(&mut Command::new(env!("CARGO_BIN_EXE_tether")))
        .args(["batch", "steps.txt"])
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stderr(writer)
        .output()
        .expect("tether runs");
    assert_eq!(output.status.code(), Some(0), "exit 101 is a panic");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["5", "9"], "{stdout}");
}

/// `--timeout` holds for the built-in server too (it was added after the limit was applied to
/// the configured servers, so a slow built-in tool ran on under `--timeout 1`).
#[test]
fn the_timeout_flag_reaches_the_built_in_server() {
    let run = tether(&["--timeout", "0.001", "tools"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("server \"builtin\": startup timed out after 1ms"),
        "{}",
        run.stderr
    );
    let run = tether(&["--timeout", "20", "tools"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("builtin__add"), "{}", run.stdout);
}

#[test]
fn batch_runs_tester_commands_against_servers_started_once() {
    // server-memory keeps its graph in the process: a later line sees what an earlier one
    // made only if the server was started once for the whole batch.
    let dir = tempdir().join("batch");
    std::fs::create_dir_all(&dir).unwrap();
    // Its graph file is the test's own (by default it sits inside the npm package).
    let graph_file = dir.join("memory.jsonl");
    let _ = std::fs::remove_file(&graph_file);
    std::fs::write(
        dir.join("tether.json"),
        serde_json::json!({"mcpServers": {"memory": {
            "command": test_support::npm_bin("mcp-server-memory"),
            "env": {"MEMORY_FILE_PATH": graph_file},
        }}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("steps.txt"),
        "# a comment, then a blank line\n\n\
         call memory create_entities '{\"entities\": [{\"name\": \"milk\", \"entityType\": \"item\", \"observations\": [\"buy\"]}]}'\n\
         call memory nope\n\
         call memory read_graph\n",
    )
    .unwrap();
    let run = tether_in(&dir, &["--config", "tether.json", "batch", "steps.txt"]);
    assert_eq!(run.code, 1, "the first failure's code: {}", run.stderr);
    assert!(
        run.stderr
            .contains("error: steps.txt:4: server \"memory\": unknown tool \"nope\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("── steps.txt:5: call memory read_graph"),
        "{}",
        run.stderr
    );
    let graph = run.stdout.rsplit("\"relations\"").count();
    assert_eq!(graph, 2, "read_graph ran after the failure: {}", run.stdout);
    assert!(
        run.stdout.contains("\"relations\": []") && run.stdout.matches("\"milk\"").count() >= 2,
        "the graph read on line 5 holds what line 3 made: {}",
        run.stdout
    );

    // --strict stops at the first failure.
    let strict = tether_in(
        &dir,
        &["--strict", "--config", "tether.json", "batch", "steps.txt"],
    );
    assert_eq!(strict.code, 1);
    assert!(!strict.stderr.contains("steps.txt:5"), "{}", strict.stderr);

    // Every line is checked before anything runs.
    std::fs::write(dir.join("typo.txt"), "tools\ncal memory read_graph\n").unwrap();
    let typo = tether_in(&dir, &["--config", "tether.json", "batch", "typo.txt"]);
    assert_eq!(typo.code, 1);
    assert!(
        typo.stderr
            .contains("typo.txt:2: unrecognized subcommand 'cal'"),
        "{}",
        typo.stderr
    );
    assert!(typo.stdout.is_empty(), "nothing ran: {}", typo.stdout);
    std::fs::write(dir.join("run.txt"), "run hello\n").unwrap();
    let refused = tether_in(&dir, &["--config", "tether.json", "batch", "run.txt"]);
    assert!(
        refused.stderr.contains("`run` cannot run in a batch"),
        "{}",
        refused.stderr
    );
}

/// A config file in the wrong shape is an error naming the key Tether expected, never a run
/// against the built-in server instead: a typo of "mcpServers", VS Code's "servers", or a file
/// named with --config that declares no servers at all.
#[test]
fn a_config_in_the_wrong_shape_is_an_error_not_the_built_in_server() {
    let dir = tempdir().join("wrong-shape");
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text, expected) in [
        (
            "typo.json",
            r#"{"mcpServer": {"e": {"command": "true"}}}"#,
            "did you mean \"mcpServers\"?",
        ),
        (
            "vscode.json",
            r#"{"servers": {"e": {"type": "stdio", "command": "true"}}}"#,
            "VS Code's mcp.json shape",
        ),
        (
            "settings.json",
            r#"{"toolSelectoin": "all"}"#,
            "no \"mcpServers\" key",
        ),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
        let run = tether_in(&dir, &["--strict", "--config", file, "tools"]);
        assert_eq!(run.code, 1, "{file}: {}", run.stderr);
        let line = run.only_error();
        assert!(
            line.contains(file) && line.contains(expected),
            "{file}: {line}"
        );
        assert!(!run.stdout.contains("builtin__"), "{file}: {}", run.stdout);
    }
    // Settings alone with ad-hoc servers are fine: the servers come from the command line.
    let run = tether_in(
        &dir,
        &[
            "--config",
            "settings.json",
            "--stdio",
            &misbehaving_stdio("working"),
            "tools",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn strict_mode_makes_config_warnings_errors_and_completions_are_generated() {
    let dir = tempdir().join("strict");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tether.json"),
        r#"{"mcpServers": {"e": {"command": "true", "colour": "blue"}}}"#,
    )
    .unwrap();
    let lenient = tether_in(&dir, &["--config", "tether.json", "tools", "--search", "x"]);
    assert!(lenient.stderr.contains("colour"), "{}", lenient.stderr);
    let strict = tether_in(&dir, &["--strict", "--config", "tether.json", "tools"]);
    assert_eq!(strict.code, 1, "{}", strict.stderr);
    assert!(
        strict.stderr.contains("colour")
            && strict
                .stderr
                .contains("--strict makes config warnings errors"),
        "{}",
        strict.stderr
    );
    // A typo at the top of the config is named, with the key it was meant to be.
    std::fs::write(
        dir.join("typo.json"),
        "{\n  \"mcpServers\": {\"e\": {\"command\": \"true\"}},\n  \"toolSelectoin\": \"all\"\n}",
    )
    .unwrap();
    let lenient = tether_in(&dir, &["--config", "typo.json", "tools", "--search", "x"]);
    assert!(
        lenient.stderr.contains(
            "typo.json (line 3): unknown top-level key \"toolSelectoin\" ignored (did you mean \"toolSelection\"?)"
        ),
        "{}",
        lenient.stderr
    );
    let strict = tether_in(&dir, &["--strict", "--config", "typo.json", "tools"]);
    assert_eq!(strict.code, 1, "{}", strict.stderr);
    assert!(strict.stderr.contains("toolSelectoin"), "{}", strict.stderr);
    // A setting of the wrong kind stops every command, even one that does not read it, with
    // the file, the key and the fix on one line.
    std::fs::write(
        dir.join("kind.json"),
        r#"{"mcpServers": {"e": {"command": "true"}}, "contextWindow": "big"}"#,
    )
    .unwrap();
    let wrong = tether_in(&dir, &["--config", "kind.json", "tools"]);
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains(
            "kind.json: \"contextWindow\" is \"big\"; give the model's context window in tokens"
        ) && wrong.stderr.trim().lines().count() == 1,
        "{}",
        wrong.stderr
    );
    for (shell, marker) in [
        ("bash", "_tether()"),
        ("zsh", "#compdef tether"),
        ("fish", "complete -c tether"),
    ] {
        let script = tether_in(&dir, &["completions", shell]);
        assert_eq!(script.code, 0, "{}", script.stderr);
        assert!(
            script.stdout.contains(marker),
            "{shell}: {}",
            &script.stdout[..200.min(script.stdout.len())]
        );
        assert!(
            script.stdout.contains("batch"),
            "{shell} completes subcommands"
        );
    }
}
