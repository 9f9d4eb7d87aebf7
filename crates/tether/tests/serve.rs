//! End-to-end tests of `tether serve`: real MCP clients (the official TypeScript and Python
//! SDK clients, and Tether itself) against the gateway binary in front of real servers
//! (server-everything and mcp-server-time), in both protocol eras.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::jwt::{ISSUER, IdentityProvider};
use test_support::{
    everything_stdio, misbehaving_stdio, py_gateway_client, scratch_dir, time_stdio,
    ts_gateway_client,
};

/// A client scenario takes a few seconds; a hang fails the test instead of CI.
const DEADLINE: Duration = Duration::from_secs(120);

fn tether() -> &'static str {
    env!("CARGO_BIN_EXE_tether")
}

/// The gateway's command line in front of everything and time.
fn serve_args(extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        tether().to_string(),
        "serve".into(),
        "--stdio".into(),
        format!("everything={}", everything_stdio()),
        "--stdio".into(),
        format!("time={}", time_stdio()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Runs a client to completion and parses the one JSON object it prints.
fn run_client(mut command: Command) -> Value {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("the client starts");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("the client did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("client output is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"))
}

fn text(report: &Value, step: &str) -> String {
    match report[step]["text"].as_str() {
        Some(text) => text.to_string(),
        None => panic!("step {step} failed: {}", report[step]),
    }
}

#[test]
fn python_sdk_client_uses_the_gateway_over_stdio_in_both_eras() {
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let mut client = py_gateway_client();
        client.arg(mode).args(serve_args(&[]));
        let report = run_client(client);
        assert_eq!(report["protocol_version"], version, "{report}");
        let tools: Vec<&str> = report["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: tools/list failed: {}", report["tools"]))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(tools.contains(&"everything__get-sum"), "{tools:?}");
        assert!(tools.contains(&"time__get_current_time"), "{tools:?}");
        assert_eq!(text(&report, "sum"), "The sum of 2 and 3 is 5.");
        assert!(text(&report, "time").contains("\"timezone\": \"UTC\""));
        assert_eq!(
            report["progress"]["progress"],
            json!([1.0, 2.0, 3.0]),
            "{mode}"
        );
        assert_eq!(report["resources"]["count"], 7, "{report}");
        assert_eq!(report["resources"]["templates"], 2, "{report}");
        assert!(report["resources"]["read_chars"].as_u64().unwrap() > 100);
        assert!(
            report["prompts"]["names"]
                .as_array()
                .unwrap()
                .contains(&json!("everything__args-prompt"))
        );
        assert_eq!(report["prompts"]["text"], "What's weather in Paris?");
        assert!(
            report["unknown"]["error"]
                .as_str()
                .unwrap()
                .contains("unknown tool \"everything__no-such-tool\""),
            "{report}"
        );
        // The upstream server's sampling request reached this client and came back: as a
        // request at 2025-11-25; at 2026-07-28, which takes no requests, as an input-required
        // result while the gateway held the upstream call, answered in the client's retry.
        assert_eq!(
            report["sampled_prompt"], "Resource trigger-sampling-request context: Say hi",
            "{mode}: {report}"
        );
        assert!(
            text(&report, "sampling").contains("sampled by the client"),
            "{mode}: {report}"
        );
    }
}

#[test]
fn typescript_sdk_client_gets_progress_cancellation_completion_and_sampling() {
    let mut client = ts_gateway_client();
    client.arg("all").args(serve_args(&[]));
    let report = run_client(client);
    assert_eq!(report["server"], "tether-gateway");
    assert_eq!(
        report["tools"].as_array().map(Vec::len),
        Some(19),
        "{report}"
    );
    assert_eq!(text(&report, "sum"), "The sum of 2 and 3 is 5.");
    assert_eq!(report["time"]["is_error"], false);
    // The gateway relays all four steps before the result. The TypeScript SDK handles a
    // notification a microtask after reading it but a response at once, so when the last step
    // and the result arrive in one read, the client has already dropped the call's progress
    // handler: its own race, which shows as a missing last step under load.
    let progress = &report["progress"]["progress"];
    assert!(
        *progress == json!([1, 2, 3, 4]) || *progress == json!([1, 2, 3]),
        "{report}"
    );
    // The 30-second call was abandoned at once, and the gateway kept serving.
    assert_eq!(report["cancel"]["aborted"], true, "{report}");
    assert!(report["cancel"]["seconds"].as_f64().unwrap() < 10.0);
    assert_eq!(report["cancel"]["after"], "The sum of 1 and 1 is 2.");
    assert_eq!(report["resources"]["count"], 7, "{report}");
    assert_eq!(report["prompt"], "What's weather in Oslo?");
    assert_eq!(report["complete"], json!(["Engineering"]), "{report}");
    assert!(text(&report, "sampling").contains("sampled by the TypeScript client"));
}

#[test]
fn search_mode_serves_one_tool_and_announces_what_a_search_loads() {
    let mut client = ts_gateway_client();
    client
        .arg("search")
        .args(serve_args(&["--tools", "search"]));
    let report = run_client(client);
    assert_eq!(report["tools"], json!(["search_tools"]), "{report}");
    assert!(text(&report, "search").contains("everything__get-sum"));
    assert_eq!(report["list_changed"], 1, "{report}");
    let after = report["tools_after"].as_array().unwrap();
    assert!(after.contains(&json!("everything__get-sum")), "{report}");
    assert!(after.contains(&json!("search_tools")));
    assert_eq!(text(&report, "sum"), "The sum of 20 and 22 is 42.");
}

#[test]
fn meta_mode_serves_mcp_query_and_answers_a_bad_call_with_the_schema() {
    let mut client = ts_gateway_client();
    client.arg("meta").args(serve_args(&["--tools", "meta"]));
    let report = run_client(client);
    assert_eq!(report["tools"], json!(["mcp_query"]), "{report}");
    assert_eq!(text(&report, "sum"), "The sum of 4 and 5 is 9.");
    assert_eq!(report["bad"]["is_error"], true);
    let bad = text(&report, "bad");
    assert!(bad.contains("\"b\" is a required property"), "{bad}");
    assert!(bad.contains("\"required\":[\"a\",\"b\"]"), "{bad}");
}

/// Tether as the client of a Tether gateway, through a config file.
fn tether_through_gateway(test: &str, gateway: Value, args: &[&str]) -> (i32, String, String) {
    let dir = scratch_dir("serve", test);
    std::fs::write(dir.join("inner.json"), gateway.to_string()).unwrap();
    let outer = json!({"mcpServers": {"gw": {
        "command": tether(),
        "args": ["serve", "--config", dir.join("inner.json"), "--no-prefix"],
    }}});
    let outer_without_no_prefix = json!({"mcpServers": {"gw": {
        "command": tether(),
        "args": ["serve", "--config", dir.join("inner.json")],
    }}});
    let prefixed = args.first() == Some(&"--prefixed");
    let config = if prefixed {
        outer_without_no_prefix
    } else {
        outer
    };
    std::fs::write(dir.join("outer.json"), config.to_string()).unwrap();
    let args = if prefixed { &args[1..] } else { args };
    let output = Command::new(tether())
        .arg("--config")
        .arg(dir.join("outer.json"))
        .args(args)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn one_server(extra: Value) -> Value {
    let mut config = json!({"mcpServers": {"everything": {
        "command": test_support::npm_bin("mcp-server-everything"),
        "args": ["stdio"],
    }}});
    if let (Value::Object(config), Value::Object(extra)) = (&mut config, extra) {
        config.extend(extra);
    }
    config
}

#[test]
fn no_prefix_keeps_the_upstream_names_and_needs_one_server() {
    let (code, stdout, stderr) =
        tether_through_gateway("noprefix", one_server(json!({})), &["tools", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let tools: Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"get-sum"), "{names:?}");
    let (code, stdout, _) = tether_through_gateway(
        "noprefix-call",
        one_server(json!({})),
        &["call", "gw", "get-sum", "a=1", "b=2"],
    );
    assert_eq!(code, 0);
    assert!(stdout.contains("The sum of 1 and 2 is 3."), "{stdout}");

    // With two upstream servers the gateway refuses --no-prefix with the fix.
    let mut two = one_server(json!({}));
    two["mcpServers"]["time"] = json!({"command": test_support::venv_bin("mcp-server-time")});
    let (code, _, stderr) = tether_through_gateway("noprefix-two", two, &["tools"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--no-prefix") && stderr.contains("exactly one upstream server"),
        "{stderr}"
    );
}

#[test]
fn the_gateway_enforces_deny_and_asks_the_client_for_ask() {
    let config = one_server(json!({"approval": {
        "deny": ["everything__get-env"],
        "ask": ["everything__echo"],
    }}));
    let (code, stdout, _) = tether_through_gateway(
        "deny",
        config.clone(),
        &["--prefixed", "call", "gw", "everything__get-env"],
    );
    assert_eq!(code, 3, "a blocked tool is a tool error: {stdout}");
    assert!(stdout.contains("is blocked"), "{stdout}");
    assert!(stdout.contains("deny \"everything__get-env\""), "{stdout}");
    let (code, stdout, _) = tether_through_gateway(
        "ask",
        config,
        &["--prefixed", "call", "gw", "everything__echo", "message=hi"],
    );
    // The tester speaks 2026-07-28 to the gateway: the approval comes to it as an input round,
    // which its host answers with a decline when no one is at a terminal to ask.
    assert_eq!(code, 3, "{stdout}");
    assert!(stdout.contains("did not approve"), "{stdout}");
}

/// An `ask` rule asks a 2025-11-25 client's user with the four options every front end
/// offers (the official Python SDK client answers): "always allow" runs that tool from then on
/// without asking, "always reject" refuses it from then on without asking.
#[test]
fn ask_rules_offer_the_four_options_and_keep_always_answers_for_the_session() {
    let dir = scratch_dir("serve", "ask-always");
    let config = dir.join("rules.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {}, "approval": {"ask": ["everything__echo", "everything__get-sum"]}})
            .to_string(),
    )
    .unwrap();
    let mut client = py_gateway_client();
    client
        .arg("approval")
        .args(serve_args(&["--config", config.to_str().unwrap()]));
    let report = run_client(client);
    let asked = report["asked"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(asked.len(), 2, "each tool asked once: {report:#}");
    assert!(
        asked[0]["message"]
            .as_str()
            .unwrap()
            .contains("everything__echo"),
        "{report:#}"
    );
    assert_eq!(
        asked[0]["options"],
        json!(["allow_once", "allow_always", "reject_once", "reject_always"])
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[0]["text"], "Echo: one", "{report:#}");
    assert_eq!(
        results[1]["text"], "Echo: two",
        "not asked again: {report:#}"
    );
    for refused in &results[2..] {
        assert_eq!(refused["is_error"], true, "{report:#}");
    }
    assert!(
        results[2]["text"]
            .as_str()
            .unwrap()
            .contains("did not approve"),
        "{report:#}"
    );
    assert!(
        results[3]["text"]
            .as_str()
            .unwrap()
            .contains("rejected \"everything__get-sum\" for the rest of this session"),
        "{report:#}"
    );
}

/// What a server says beside a listing's fields (`_meta`, `icons`, a resource's
/// `annotations`) reaches the gateway's clients unchanged, for tools, resources, templates and
/// prompts (read by the official Python SDK client); an MCP Apps tool meant only for its app's
/// view is not listed to a client that did not declare the extension.
#[test]
fn meta_icons_and_annotations_pass_through_and_app_only_tools_stay_with_apps() {
    let mut client = py_gateway_client();
    client.arg("listings").args([
        tether().to_string(),
        "serve".into(),
        "--stdio".into(),
        format!("decorated={}", misbehaving_stdio("decorated")),
    ]);
    let report = run_client(client);
    let meta = json!({"example.com/owner": "decorations", "example.com/rank": 3});
    let icons = json!([{"src": "https://example.com/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}]);
    let tools = report["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{report:#}"));
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["decorated__boom"], "{report:#}");
    for (kind, item) in [
        ("tool", &tools[0]),
        ("resource", &report["resources"][0]),
        ("template", &report["templates"][0]),
        ("prompt", &report["prompts"][0]),
    ] {
        assert_eq!(item["_meta"], meta, "{kind}: {item:#}");
        assert_eq!(item["icons"], icons, "{kind}: {item:#}");
    }
    assert_eq!(
        report["resources"][0]["annotations"],
        json!({"audience": ["user"], "priority": 0.5}),
        "{report:#}"
    );
}

/// `tether serve --http 127.0.0.1:0` in front of everything and time; killed on drop.
struct HttpGateway {
    child: std::process::Child,
    url: String,
}

impl HttpGateway {
    fn start(extra: &[&str], env: &[(&str, &str)]) -> HttpGateway {
        let args = serve_args(&[&["--http", "127.0.0.1:0"], extra].concat());
        let mut command = Command::new(&args[0]);
        command.args(&args[1..]).envs(env.iter().copied());
        let (child, url) = test_support::spawn_http_gateway(&mut command);
        HttpGateway { child, url }
    }

    /// One raw HTTP POST of an `initialize` request that the gateway refuses: the status code
    /// and the whole response (a refusal is short and closes the connection).
    fn refusal(&self, headers: &[(&str, &str)]) -> (u16, String) {
        let mut stream = self.send_initialize(headers);
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.split(' ').nth(1).unwrap().parse().unwrap();
        (status, response)
    }

    /// One raw HTTP POST of an `initialize` request; returns the status line's code.
    fn post_initialize(&self, headers: &[(&str, &str)]) -> u16 {
        let mut stream = self.send_initialize(headers);
        let mut response = Vec::new();
        let mut buffer = [0u8; 1024];
        // The status line is all we need; an SSE body may stay open.
        while !response.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buffer).unwrap();
            assert!(
                n > 0,
                "the gateway closed the connection without a status line"
            );
            response.extend_from_slice(&buffer[..n]);
        }
        let status = String::from_utf8_lossy(&response);
        status.split(' ').nth(1).unwrap().parse().unwrap()
    }

    fn send_initialize(&self, headers: &[(&str, &str)]) -> std::net::TcpStream {
        use std::io::Write;
        let address = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp");
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        stream
    }
}

impl Drop for HttpGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sdk_clients_use_the_gateway_over_streamable_http_in_both_eras() {
    let gateway = HttpGateway::start(&[], &[]);
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let mut client = py_gateway_client();
        client.arg(mode).arg(&gateway.url);
        let report = run_client(client);
        assert_eq!(report["protocol_version"], version, "{report}");
        assert_eq!(text(&report, "sum"), "The sum of 2 and 3 is 5.");
        assert!(text(&report, "time").contains("\"timezone\": \"UTC\""));
        assert_eq!(
            report["progress"]["progress"],
            json!([1.0, 2.0, 3.0]),
            "{mode}"
        );
        assert_eq!(report["resources"]["count"], 7, "{report}");
        assert_eq!(report["prompts"]["text"], "What's weather in Paris?");
        if mode == "legacy" {
            assert!(text(&report, "sampling").contains("sampled by the client"));
        }
    }
    let mut client = ts_gateway_client();
    client.arg("all").arg(&gateway.url);
    let report = run_client(client);
    assert_eq!(
        report["tools"].as_array().map(Vec::len),
        Some(19),
        "{report}"
    );
    // The gateway relays all four steps before the result. The TypeScript SDK handles a
    // notification a microtask after reading it but a response at once, so when the last step
    // and the result arrive in one read, the client has already dropped the call's progress
    // handler: its own race, which shows as a missing last step under load.
    let progress = &report["progress"]["progress"];
    assert!(
        *progress == json!([1, 2, 3, 4]) || *progress == json!([1, 2, 3]),
        "{report}"
    );
    assert_eq!(report["cancel"]["after"], "The sum of 1 and 1 is 2.");
    assert!(text(&report, "sampling").contains("sampled by the TypeScript client"));
}

#[test]
fn http_gateway_refuses_missing_and_wrong_tokens_and_foreign_origins() {
    let gateway = HttpGateway::start(
        &["--tools", "meta"],
        &[(
            "TETHER_SERVE_TOKENS",
            "first-token-0123456789, second-token-0123456789",
        )],
    );
    assert_eq!(gateway.post_initialize(&[]), 401);
    assert_eq!(
        gateway.post_initialize(&[("Authorization", "Bearer wrong-token")]),
        401
    );
    assert_eq!(
        gateway.post_initialize(&[("Authorization", "Bearer second-token-0123456789")]),
        200
    );
    assert_eq!(
        gateway.post_initialize(&[
            ("Authorization", "Bearer first-token-0123456789"),
            ("Origin", "https://evil.example")
        ]),
        403
    );
    // A real client with the token works end to end.
    let mut client = ts_gateway_client();
    client.arg("meta").arg(&gateway.url).env(
        "GATEWAY_HEADERS",
        r#"{"Authorization": "Bearer first-token-0123456789"}"#,
    );
    let report = run_client(client);
    assert_eq!(text(&report, "sum"), "The sum of 4 and 5 is 9.", "{report}");
}

#[test]
fn a_static_token_sees_and_calls_only_the_tools_it_lists() {
    let gateway = HttpGateway::start(
        &["--tools", "meta"],
        &[(
            "TETHER_SERVE_TOKENS",
            "open-token-0123456789, narrow-token-0123456789 time__*",
        )],
    );
    let run = |token: &str| {
        let mut client = ts_gateway_client();
        client.arg("meta").arg(&gateway.url).env(
            "GATEWAY_HEADERS",
            json!({"Authorization": format!("Bearer {token}")}).to_string(),
        );
        run_client(client)
    };
    let open = run("open-token-0123456789");
    assert_eq!(text(&open, "sum"), "The sum of 4 and 5 is 9.", "{open}");
    // Through mcp_query, the narrow token's client does not even learn the other server.
    let narrow = run("narrow-token-0123456789");
    assert_eq!(narrow["sum"]["is_error"], true, "{narrow}");
    assert_eq!(
        text(&narrow, "sum"),
        "unknown server \"everything\"; the servers are time",
        "{narrow}"
    );

    // Beyond tools too: the narrow token lists, reads, expands and completes nothing of a
    // server whose tools it may not call; the open token still does.
    let dir = std::env::temp_dir().join(format!("tether-serve-narrow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tester = |token: &str, args: &[&str]| {
        let config = dir.join(format!("{token}.json"));
        std::fs::write(
            &config,
            json!({"mcpServers": {"gw": {"url": gateway.url,
                "headers": {"Authorization": format!("Bearer {token}")}}}})
            .to_string(),
        )
        .unwrap();
        let output = Command::new(tether())
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let architecture = "demo://resource/static/document/architecture.md";
    let (code, listed, _) = tester("open-token-0123456789", &["resources"]);
    assert_eq!(code, Some(0));
    assert!(listed.contains(architecture), "{listed}");
    let (code, _, _) = tester("open-token-0123456789", &["read", "gw", architecture]);
    assert_eq!(code, Some(0));
    let (_, listed, _) = tester("narrow-token-0123456789", &["resources"]);
    assert!(!listed.contains("demo://"), "{listed}");
    let (code, out, err) = tester("narrow-token-0123456789", &["read", "gw", architecture]);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        err.contains("not found") || err.contains("unknown"),
        "{err}"
    );
    let (_, listed, _) = tester("narrow-token-0123456789", &["prompts"]);
    assert!(!listed.contains("everything__"), "{listed}");
    let (_, listed, _) = tester("open-token-0123456789", &["prompts"]);
    assert!(listed.contains("everything__"), "{listed}");
}

#[test]
fn jwt_gateway_checks_signature_issuer_audience_and_expiry_and_applies_the_tools_claim() {
    let idp = IdentityProvider::start();
    let gateway = HttpGateway::start(
        &[
            "--jwks-url",
            idp.jwks_url(),
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            "tether",
        ],
        &[],
    );
    let bearer = |token: &str| format!("Bearer {token}");
    let refused = |token: &str, why: &str| {
        let (status, response) = gateway.refusal(&[("Authorization", &bearer(token))]);
        assert_eq!(status, 401, "{response}");
        assert!(response.contains(why), "expected {why:?} in:\n{response}");
        assert!(
            response
                .to_lowercase()
                .contains("www-authenticate: bearer error=\"invalid_token\""),
            "{response}"
        );
    };
    let (status, _) = gateway.refusal(&[]);
    assert_eq!(status, 401);
    refused("not-a-token", "not one the gateway accepts");
    let expired = idp.token("tether", json!({"exp": IdentityProvider::now() - 3600}));
    refused(&expired, "expired");
    refused(
        &idp.token("another-service", json!({})),
        "audience does not include",
    );
    refused(
        &idp.token("tether", json!({"iss": "https://elsewhere.test"})),
        "issuer is not",
    );
    let mut forged: Vec<String> = idp
        .token("tether", json!({}))
        .split('.')
        .map(String::from)
        .collect();
    forged[1] = idp
        .token("tether", json!({"sub": "admin"}))
        .split('.')
        .nth(1)
        .unwrap()
        .into();
    refused(&forged.join("."), "bad signature");
    let valid = idp.token("tether", json!({}));
    assert_eq!(
        gateway.post_initialize(&[("Authorization", &bearer(&valid))]),
        200
    );
    // The key set is fetched once and then served from the cache.
    assert_eq!(idp.fetches(), 1);
    // A token whose claim allows only the time server's tools lists and calls only those.
    let narrow = idp.token("tether", json!({"tether_tools": ["time__*"]}));
    let mut client = ts_gateway_client();
    client.arg("all").arg(&gateway.url).env(
        "GATEWAY_HEADERS",
        json!({"Authorization": bearer(&narrow)}).to_string(),
    );
    let report = run_client(client);
    assert_eq!(
        report["tools"],
        json!(["time__convert_time", "time__get_current_time"]),
        "{report}"
    );
    assert!(text(&report, "time").contains("\"timezone\": \"UTC\""));
    let error = report["sum"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("unknown tool \"everything__get-sum\""),
        "{report}"
    );
}

#[test]
fn a_non_loopback_gateway_needs_tokens() {
    let output = Command::new(tether())
        .args(["serve", "--http", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("needs authentication") && stderr.contains("--token-file"),
        "{stderr}"
    );
}

/// A guessable static token is refused at start, naming the file, the line and the fix.
#[test]
fn a_short_static_token_is_refused_at_start() {
    let dir = scratch_dir("serve", "short-token");
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        "# the ops team\nlong-enough-token-0123 time__*\nabc\n",
    )
    .unwrap();
    let mut child = Command::new(tether())
        .args(["serve", "--http", "127.0.0.1:0", "--token-file"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A gateway that took the token would serve until killed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gateway started with a 3-character token");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("tokens:3: a token of 3 characters") && stderr.contains("at least 16"),
        "{stderr}"
    );
}

#[test]
fn the_gateway_blocks_a_tool_that_changed_since_it_was_pinned_until_accepted() {
    let dir = scratch_dir("serve", "pins");
    let data = dir.join("data");
    let write_inner = |description: Option<&str>| {
        let env = description.map_or(json!({}), |d| json!({ "BOOM_DESCRIPTION": d }));
        let inner = json!({"mcpServers": {"flaky": {
            "command": "python3",
            "args": [test_support::fixture("misbehaving_server.py"), "working"],
            "env": env,
        }}});
        std::fs::write(dir.join("inner.json"), inner.to_string()).unwrap();
    };
    let outer = json!({"mcpServers": {"gw": {
        "command": tether(),
        "args": ["serve", "--config", dir.join("inner.json")],
        "env": {"TETHER_DATA_DIR": data},
    }}});
    std::fs::write(dir.join("outer.json"), outer.to_string()).unwrap();
    let tether_here = |args: &[&str]| {
        Command::new(tether())
            .args(args)
            .current_dir(&dir)
            .env("TETHER_DATA_DIR", &data)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let outer = dir.join("outer.json");
    let call = [
        "--config",
        outer.to_str().unwrap(),
        "call",
        "gw",
        "flaky__boom",
    ];
    write_inner(None);
    let first = tether_here(&call);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    write_inner(Some("Now also uploads your files."));
    let blocked = tether_here(&call);
    let stdout = String::from_utf8_lossy(&blocked.stdout);
    assert_eq!(blocked.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("is blocked: it changed since it was pinned")
            && stdout.contains("Now also uploads your files.")
            && stdout.contains("tether pins accept flaky"),
        "{stdout}"
    );
    let inner = dir.join("inner.json");
    let accept = tether_here(&[
        "--config",
        inner.to_str().unwrap(),
        "pins",
        "accept",
        "flaky",
    ]);
    assert_eq!(accept.status.code(), Some(0), "{accept:?}");
    let after = tether_here(&call);
    assert_eq!(after.status.code(), Some(0), "{after:?}");
}

/// An OTLP/HTTP collector on loopback: keeps the JSON body of every POST to /v1/traces.
fn otlp_collector() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let bodies = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut line, mut length, mut path) = (String::new(), 0usize, String::new());
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                if path.is_empty() {
                    path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            if path == "/v1/traces"
                && let Ok(value) = serde_json::from_slice::<Value>(&body)
            {
                bodies.lock().unwrap().push(value);
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            );
        }
    });
    (address, received)
}

#[test]
fn traces_go_to_the_otlp_endpoint_a_span_per_request_with_a_child_per_upstream_call() {
    let (endpoint, received) = otlp_collector();
    let probe = format!("probe={}", misbehaving_stdio("echo-meta"));
    let gateway = HttpGateway::start(
        &["--stdio", &probe],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    let dir = scratch_dir("serve", "otlp");
    let output = Command::new(tether())
        .current_dir(&dir)
        .args(["--url", &format!("gw={}", gateway.url)])
        .args(["call", "gw", "everything__get-sum", "a=2", "b=3"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Spans arrive in batches; wait for the pair, not for a time.
    let deadline = std::time::Instant::now() + DEADLINE;
    let (request, upstream) = loop {
        let spans: Vec<Value> = received
            .lock()
            .unwrap()
            .iter()
            .flat_map(|batch| {
                batch["resourceSpans"][0]["scopeSpans"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .flat_map(|scope| scope["spans"].as_array().cloned().unwrap_or_default())
            .collect();
        let find = |name: &str| spans.iter().find(|s| s["name"] == name).cloned();
        if let (Some(request), Some(upstream)) = (
            find("tools/call everything__get-sum"),
            find("tools/call get-sum"),
        ) {
            break (request, upstream);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no request/upstream span pair; got {:?}",
            spans.iter().map(|s| s["name"].clone()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(request["kind"], 2, "server span: {request}");
    assert_eq!(upstream["kind"], 3, "client span: {upstream}");
    assert_eq!(upstream["traceId"], request["traceId"]);
    assert_eq!(upstream["parentSpanId"], request["spanId"], "{upstream}");
    let attribute = |span: &Value, key: &str| {
        span["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| a["value"]["stringValue"].clone())
    };
    assert_eq!(
        attribute(&upstream, "server.name"),
        Some(json!("everything"))
    );
    assert_eq!(
        attribute(&request, "mcp.method.name"),
        Some(json!("tools/call"))
    );
    let service = received.lock().unwrap()[0]["resourceSpans"][0]["resource"]["attributes"].clone();
    assert!(service.to_string().contains("\"tether\""), "{service}");

    // A client's own trace continues through the gateway: its `traceparent`, in `_meta` as
    // MCP carries it or as an HTTP header, is the parent of the request span.
    let in_meta = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let in_header = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let traceparent = |(trace, span): (&str, &str)| format!("00-{trace}-{span}-01");
    let answer = modern_call(
        &gateway.url,
        "everything__get-sum",
        json!({"a": 2, "b": 3}),
        Some(&traceparent(in_meta)),
        None,
    );
    assert!(answer.contains("The sum of 2 and 3 is 5"), "{answer}");
    let answer = modern_call(
        &gateway.url,
        "everything__echo",
        json!({"message": "traced"}),
        None,
        Some(&traceparent(in_header)),
    );
    assert!(answer.contains("traced"), "{answer}");
    for (name, (trace, span)) in [
        ("tools/call everything__get-sum", in_meta),
        ("tools/call everything__echo", in_header),
    ] {
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let spans = received.lock().unwrap().clone();
            let continued = spans.iter().any(|batch| {
                batch.to_string().contains(trace) && {
                    let text = batch.to_string();
                    text.contains(name) && text.contains(&format!("\"parentSpanId\":\"{span}\""))
                }
            });
            if continued {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no span \"{name}\" in trace {trace} under span {span}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // The trace goes on upstream: the server gets the gateway's upstream span as its parent
    // in `_meta.traceparent`, so its own spans join the same trace.
    let answer = modern_call(
        &gateway.url,
        "probe__boom",
        json!({}),
        Some(&traceparent(in_meta)),
        None,
    );
    let echoed: Value = serde_json::from_str(
        rpc_message(&answer)["result"]["content"][0]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let upstream_parent = echoed["traceparent"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let parts: Vec<&str> = upstream_parent.split('-').collect();
    assert_eq!(parts.len(), 4, "{echoed}");
    assert_eq!(parts[1], in_meta.0, "the client's trace goes on: {echoed}");
    assert_ne!(
        parts[2], in_meta.1,
        "under the gateway's own span: {echoed}"
    );
    let deadline = std::time::Instant::now() + DEADLINE;
    while !received.lock().unwrap().iter().any(|batch| {
        let text = batch.to_string();
        text.contains("tools/call boom") && text.contains(&format!("\"spanId\":\"{}\"", parts[2]))
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "no upstream span {} named \"tools/call boom\"",
            parts[2]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One stateless 2026-07-28 `tools/call` over raw HTTP, with a `traceparent` in `_meta`
/// and/or as a header; returns the whole response.
fn modern_call(
    url: &str,
    tool: &str,
    arguments: Value,
    meta_traceparent: Option<&str>,
    header_traceparent: Option<&str>,
) -> String {
    let mut meta = modern_meta(json!({}));
    if let Some(traceparent) = meta_traceparent {
        meta["traceparent"] = json!(traceparent);
    }
    let params = json!({"name": tool, "arguments": arguments, "_meta": meta});
    let header = header_traceparent
        .map(|t| format!("traceparent: {t}\r\n"))
        .unwrap_or_default();
    post_modern(url, tool, params, &header)
}

/// The `_meta` of a 2026-07-28 request from a client with `capabilities`.
fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    })
}

/// POSTs one 2026-07-28 `tools/call` of `tool` with `params` and returns the whole response.
fn post_modern(url: &str, tool: &str, params: Value, extra_headers: &str) -> String {
    use std::io::Write;
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let address = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\n{extra_headers}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The answer may come as an SSE stream that stays open: read until it holds the result.
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&response).contains(r#""id":1"#) {
        let n = stream.read(&mut buffer).unwrap();
        assert!(
            n > 0,
            "closed without an answer: {}",
            String::from_utf8_lossy(&response)
        );
        response.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&response).into_owned()
}

/// The JSON-RPC message in a response (plain JSON or one SSE `data:` line).
fn rpc_message(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.lines()
        .map(|line| line.strip_prefix("data:").unwrap_or(line).trim())
        .find_map(|line| {
            serde_json::from_str::<Value>(line)
                .ok()
                .filter(|v| v["id"] == 1)
        })
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {response}"))
}

/// A held call is not charged the time its client takes to answer: with the upstream's own
/// request timeout at 2 s, a question answered 4 s later still completes the call (the held
/// call lives its ten minutes, `HELD_FOR`, not the upstream's timeout).
#[test]
fn a_held_call_outlives_the_upstreams_timeout_while_its_client_answers() {
    let gateway = HttpGateway::start(&["--timeout", "2"], &[]);
    let tool = "everything__trigger-elicitation-request";
    let call = |round: Value| {
        let mut params = json!({"name": tool, "arguments": {},
            "_meta": modern_meta(json!({"elicitation": {}}))});
        if let (Value::Object(params), Value::Object(round)) = (&mut params, round) {
            params.extend(round);
        }
        rpc_message(&post_modern(&gateway.url, tool, params, ""))
    };
    let asked = call(json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    // The person behind the client takes twice the upstream's timeout.
    std::thread::sleep(Duration::from_secs(4));
    let answer = json!({"dev.tether/elicitation-create": {"action": "decline"}});
    let answered = call(json!({"inputResponses": answer, "requestState": state}));
    let text = answered["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("declined") && !answered.to_string().contains("timed out"),
        "{answered}"
    );
}

#[test]
fn a_legacy_servers_question_reaches_a_modern_client_in_an_input_round() {
    // server-everything (2025-11-25) asks mid-call; a 2026-07-28 client can only answer in a
    // retry, so the gateway holds the upstream call between the two requests.
    let gateway = HttpGateway::start(&[], &[]);
    let tool = "everything__trigger-elicitation-request";
    let call = |round: Value| {
        let mut params = json!({"name": tool, "arguments": {},
            "_meta": modern_meta(json!({"elicitation": {}}))});
        if let (Value::Object(params), Value::Object(round)) = (&mut params, round) {
            params.extend(round);
        }
        rpc_message(&post_modern(&gateway.url, tool, params, ""))
    };
    let asked = call(json!({}));
    let key = "dev.tether/elicitation-create";
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(
        asked["result"]["inputRequests"][key]["method"], "elicitation/create",
        "{asked}"
    );
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let answer = json!({key: {"action": "decline"}});

    let stray = call(json!({"inputResponses": answer, "requestState": format!("{state}x")}));
    assert!(
        stray["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("names no call held here"),
        "{stray}"
    );
    let answered = call(json!({"inputResponses": answer, "requestState": state}));
    assert!(
        answered["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("declined"),
        "{answered}"
    );
}

#[test]
fn an_ask_rule_asks_a_modern_client_in_an_input_round() {
    // A 2026-07-28 client takes no requests from the gateway: the approval is an input-required
    // result it answers in its retry, and the gateway keeps nothing in between.
    let dir = scratch_dir("serve", "ask-modern");
    let config = dir.join("rules.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {}, "approval": {"ask": ["everything__echo"]}}).to_string(),
    )
    .unwrap();
    let gateway = HttpGateway::start(&["--config", config.to_str().unwrap()], &[]);
    let call = |capabilities: Value, round: Value| {
        let mut params = json!({"name": "everything__echo", "arguments": {"message": "hi"},
            "_meta": modern_meta(capabilities)});
        if let (Value::Object(params), Value::Object(round)) = (&mut params, round) {
            params.extend(round);
        }
        rpc_message(&post_modern(&gateway.url, "everything__echo", params, ""))
    };

    let unable = call(json!({}), json!({}));
    assert_eq!(unable["result"]["isError"], true, "{unable}");
    assert!(unable.to_string().contains("cannot be asked"), "{unable}");

    let asked = call(json!({"elicitation": {}}), json!({}));
    let question = &asked["result"]["inputRequests"]["dev.tether/approval"];
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap()
            .contains("everything__echo"),
        "{asked}"
    );

    let answer = |action: &str| json!({"inputResponses": {"dev.tether/approval": {"action": action, "content": {}}}});
    let approved = call(json!({"elicitation": {}}), answer("accept"));
    assert_eq!(
        approved["result"]["content"][0]["text"], "Echo: hi",
        "{approved}"
    );
    let declined = call(json!({"elicitation": {}}), answer("decline"));
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    assert!(
        declined.to_string().contains("did not approve"),
        "{declined}"
    );
}

/// A task-only upstream tool (server-everything's `simulate-research-query`, a 2025-11-25
/// task) is served to a 2026-07-28 client that takes tasks as a task of the gateway's own:
/// Tether as that client gets the task id at once, polls it to the report, and a call it
/// drops is cancelled on the gateway.
#[tokio::test]
async fn the_gateway_serves_a_task_tool_as_a_task_to_a_modern_client_and_cancels_it() {
    let (code, stdout, stderr) = tether_through_gateway(
        "tasks",
        one_server(json!({})),
        &[
            "--prefixed",
            "call",
            "gw",
            "everything__simulate-research-query",
            "topic=tides",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let steps = test_support::task_events(&stdout);
    let statuses: Vec<&str> = steps
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.first(), Some(&"working"), "{stdout}");
    assert_eq!(statuses.last(), Some(&"completed"), "{stdout}");
    assert!(stdout.contains("# Research Report: tides"), "{stdout}");

    // The upstream's question during the task reaches this client through the gateway's task
    // (`input_required`, answered with `tasks/update`); nobody can answer here, so it is
    // declined, and the upstream goes on with its default.
    let (code, stdout, stderr) = tether_through_gateway(
        "tasks-input",
        one_server(json!({})),
        &[
            "--prefixed",
            "call",
            "gw",
            "everything__simulate-research-query",
            "topic=python",
            "ambiguous=true",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(r#""status":"input_required""#), "{stdout}");
    assert!(
        stderr.contains("server \"gw\" asked for input; declined"),
        "{stderr}"
    );
    assert!(
        stdout.contains("User declined - using default interpretation"),
        "{stdout}"
    );

    // The same through the library, to drop the call half-way.
    let dir = scratch_dir("serve", "tasks-cancel");
    std::fs::write(dir.join("inner.json"), one_server(json!({})).to_string()).unwrap();
    let line = format!(
        "{} serve --config {}",
        tether(),
        dir.join("inner.json").display()
    );
    let gateway = tether_mcp::config::adhoc_stdio(&line, &[]).unwrap();
    let name = gateway.name.clone();
    let registry = tether_mcp::ServerRegistry::start(
        vec![gateway],
        std::sync::Arc::new(tether_mcp::HeadlessHost),
    )
    .await;
    let connection = registry.connection(&name).unwrap();
    assert_eq!(connection.summary().protocol_version, "2026-07-28");
    assert!(connection.summary().has_capability("tasks"));
    let (sender, mut steps) = tokio::sync::mpsc::unbounded_channel();
    let arguments = json!({"topic": "waves"}).as_object().cloned();
    let call = connection.call_tool(
        "everything__simulate-research-query",
        arguments,
        Some(sender),
    );
    let first = tokio::select! {
        step = steps.recv() => step.unwrap(),
        _ = call => panic!("the task finished before its first step was seen"),
    };
    let id = first.task.unwrap().task_id;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let task = connection.task(&id).await.unwrap();
        if task["status"] == "cancelled" {
            break;
        }
        assert_ne!(
            task["status"], "completed",
            "the dropped task ran to completion"
        );
        assert!(
            Instant::now() < deadline,
            "task {id} never cancelled: {task}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    registry.shutdown().await;
}
