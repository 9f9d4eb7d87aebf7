//! The gateway's hot path (`tether-serve`'s `direct_calls`): plain `tools/call`s of a session's
//! client and 2026-07-28 stateless ones reach a stdio server past rmcp and come back as one
//! JSON body; everything else takes the full path and is answered as before. Raw HTTP on
//! loopback, so that which path answered is seen in the answer's type and in `/metrics`.

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::raw_exchange;

fn tether() -> &'static str {
    env!("CARGO_BIN_EXE_tether")
}

struct Gateway {
    child: Child,
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gateway(upstream: &str, extra: &[&str]) -> Gateway {
    let mut command = Command::new(tether());
    command
        .args(["serve", "--http", "127.0.0.1:0", "--no-prefix", "--stdio"])
        .arg(format!("up={upstream}"))
        .args(extra);
    let (child, url) = test_support::spawn_http_gateway(&mut command);
    Gateway { child, url }
}

/// Opens a 2025-11-25 session whose client declares `capabilities`; returns its id.
fn open_session(url: &str, capabilities: Value) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities,
        "clientInfo": {"name": "raw", "version": "1"}}});
    let (status, head, body) = raw_exchange(url, "POST", &[], &initialize.to_string());
    assert_eq!(status, 200, "{body}");
    let session = head
        .iter()
        .find_map(|l| {
            l.strip_prefix("mcp-session-id: ")
                .or_else(|| l.strip_prefix("Mcp-Session-Id: "))
        })
        .expect("a session id")
        .to_string();
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, _) = raw_exchange(url, "POST", &session_headers(&session), initialized);
    assert_eq!(status, 202);
    session
}

/// Calls `tool` on `session` until a call takes the hot path: rmcp handles the client's
/// `initialized` notification after answering it, and only then is the session entered for
/// the hot path. Returns how many calls the hot path had answered then.
fn until_hot(url: &str, session: &str, tool: &str, arguments: Value) -> u64 {
    for n in 0..200 {
        let (status, head, body) = raw_exchange(
            url,
            "POST",
            &session_headers(session),
            &call(100 + n, tool, arguments.clone()),
        );
        assert_eq!(status, 200, "{body}");
        if answer(&head, &body).0 == "application/json" {
            return hot_path_calls(url);
        }
    }
    panic!("no call took the hot path");
}

fn session_headers(session: &str) -> Vec<String> {
    vec![
        format!("Mcp-Session-Id: {session}"),
        "MCP-Protocol-Version: 2025-11-25".into(),
    ]
}

fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

/// The answer's content type and its JSON-RPC message.
fn answer(head: &[String], body: &str) -> (String, Value) {
    let kind = head
        .iter()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    let start = body.find("{\"jsonrpc\"").expect("a JSON-RPC message");
    let message = serde_json::Deserializer::from_str(&body[start..])
        .into_iter::<Value>()
        .next()
        .unwrap()
        .unwrap();
    (kind, message)
}

fn hot_path_calls(url: &str) -> u64 {
    test_support::raw_get(url, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix("tether_http_hot_path_calls_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A plain call answers on the hot path in both eras, as JSON; a call with `_meta` (progress)
/// and one of an unknown tool take the full path, answered as before.
#[test]
fn plain_calls_take_the_hot_path_in_both_eras_and_the_rest_the_full_path() {
    let builtin = format!("{} builtin-server", tether());
    let gateway = gateway(&builtin, &[]);
    let url = &gateway.url;
    let session = open_session(url, json!({}));
    let headers = session_headers(&session);
    let base = until_hot(url, &session, "add", json!({"a": 0, "b": 0}));

    let (status, head, body) = raw_exchange(
        url,
        "POST",
        &headers,
        &call(7, "add", json!({"a": 20, "b": 22})),
    );
    assert_eq!(status, 200, "{body}");
    let (kind, message) = answer(&head, &body);
    assert_eq!(kind, "application/json", "{head:?}");
    assert_eq!(message["id"], 7);
    assert_eq!(message["result"]["content"][0]["text"], "42", "{message}");
    assert_eq!(hot_path_calls(url), base + 1);

    // A string id comes back as it went.
    let body_text = call(0, "add", json!({"a": 1, "b": 2})).replace("\"id\":0", "\"id\":\"x-1\"");
    let (_, head, body) = raw_exchange(url, "POST", &headers, &body_text);
    let (_, message) = answer(&head, &body);
    assert_eq!(message["id"], "x-1", "{message}");
    assert_eq!(message["result"]["content"][0]["text"], "3", "{message}");
    assert_eq!(hot_path_calls(url), base + 2);

    // Progress asked for, and none reported: the hot path's JSON.
    let with_progress = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "add", "arguments": {"a": 1, "b": 1}, "_meta": {"progressToken": "p"}}});
    let (_, head, body) = raw_exchange(url, "POST", &headers, &with_progress.to_string());
    let (kind, message) = answer(&head, &body);
    assert_eq!(kind, "application/json");
    assert_eq!(message["result"]["content"][0]["text"], "2", "{message}");
    assert_eq!(hot_path_calls(url), base + 3);

    // Other `_meta`: the full path (an SSE stream), the same answer.
    let with_progress = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "add", "arguments": {"a": 1, "b": 1}, "_meta": {"example.com/note": "x"}}});
    let (status, head, body) = raw_exchange(url, "POST", &headers, &with_progress.to_string());
    assert_eq!(status, 200, "{body}");
    let (kind, message) = answer(&head, &body);
    assert_eq!(kind, "text/event-stream");
    assert_eq!(message["result"]["content"][0]["text"], "2", "{message}");
    assert_eq!(hot_path_calls(url), base + 3);

    // An unknown tool: the full path's error, naming it.
    let (_, head, body) = raw_exchange(url, "POST", &headers, &call(9, "nope", json!({})));
    let (kind, message) = answer(&head, &body);
    assert_eq!(kind, "text/event-stream");
    assert!(
        message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope"),
        "{message}"
    );

    // A 2026-07-28 stateless call, its headers matching its body.
    let modern = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {
        "name": "add", "arguments": {"a": 5, "b": 6}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}}});
    let modern_headers = vec![
        "MCP-Protocol-Version: 2026-07-28".to_string(),
        "Mcp-Method: tools/call".into(),
        "Mcp-Name: add".into(),
    ];
    let (status, head, body) = raw_exchange(url, "POST", &modern_headers, &modern.to_string());
    assert_eq!(status, 200, "{body}");
    let (kind, message) = answer(&head, &body);
    assert_eq!(kind, "application/json", "{head:?}");
    assert_eq!(message["result"]["content"][0]["text"], "11", "{message}");
    assert_eq!(hot_path_calls(url), base + 4);

    // Headers that contradict the body go to the full path, which refuses them.
    let lying = vec![
        modern_headers[0].clone(),
        modern_headers[1].clone(),
        "Mcp-Name: other".into(),
    ];
    let (status, _, body) = raw_exchange(url, "POST", &lying, &modern.to_string());
    assert_ne!(status, 200, "{body}");
    assert_eq!(hot_path_calls(url), base + 4);
}

/// rmcp ends a session its worker has not heard from for the idle timeout; calls on the hot
/// path bypass the worker, so the edge sends one through the full path now and then and a
/// session in steady use never expires.
#[test]
fn a_session_used_on_the_hot_path_outlives_the_idle_timeout() {
    let builtin = format!("{} builtin-server", tether());
    let gateway = gateway(&builtin, &["--session-idle-timeout", "3"]);
    let url = &gateway.url;
    let session = open_session(url, json!({}));
    let headers = session_headers(&session);
    let base = until_hot(url, &session, "add", json!({"a": 0, "b": 0}));
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(7) {
        n += 1;
        let (status, head, body) = raw_exchange(
            url,
            "POST",
            &headers,
            &call(n, "add", json!({"a": n, "b": 1})),
        );
        assert_eq!(
            status,
            200,
            "call {n} after {:?}: {body}",
            started.elapsed()
        );
        let (_, message) = answer(&head, &body);
        assert_eq!(
            message["result"]["content"][0]["text"],
            (n + 1).to_string(),
            "{message}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Most went the fast way.
    assert!(
        (hot_path_calls(url) - base) * 2 > n,
        "{} of {n}",
        hot_path_calls(url)
    );
}

/// A server that dies during a call on the hot path: its client hears why at once, not after
/// the call's timeout, and the next call finds the server started again.
#[test]
fn a_server_dying_during_a_hot_path_call_is_answered_at_once() {
    let crashing = test_support::misbehaving_stdio("crash-on-call");
    let gateway = gateway(&crashing, &[]);
    let url = &gateway.url;
    let session = open_session(url, json!({}));
    let headers = session_headers(&session);
    let tools = raw_exchange(
        url,
        "POST",
        &headers,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    )
    .2;
    let start = tools.find("\"name\":\"").expect("a tool") + 8;
    let tool = &tools[start..start + tools[start..].find('"').unwrap()];
    let started = Instant::now();
    let (status, head, body) = raw_exchange(url, "POST", &headers, &call(3, tool, json!({})));
    assert_eq!(status, 200, "{body}");
    let (kind, message) = answer(&head, &body);
    assert_eq!(kind, "application/json");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(message["result"]["isError"], true, "{message}");
    assert!(hot_path_calls(url) >= 1);
}
