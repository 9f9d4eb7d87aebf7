//! `tether serve --http` against misbehaving clients on loopback (issue 29's gateway probe):
//! each case is held to a status, a line that explains it and a bound on what it costs.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// POSTs an `initialize` and returns the status code of the answer (0 when the connection
/// fails or closes first).
fn initialize_status(url: &str) -> u16 {
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let Ok(mut stream) = TcpStream::connect(address) else {
        return 0;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    match stream.read_exact(&mut head) {
        Ok(()) => String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0),
        Err(_) => 0,
    }
}

type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A gateway under `ulimit -n {limit}` (with `args`), answering before the flood, then `count`
/// idle connections to it: the gateway, its address, its log and the idle sockets.
fn idle_flood(
    limit: u32,
    count: usize,
    args: &[&str],
) -> (std::process::Child, String, Log, Vec<TcpStream>) {
    let mut command = Command::new("sh");
    command
        .args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(args);
    let (child, url, log) = test_support::spawn_http_gateway_logged(&mut command);
    assert_eq!(initialize_status(&url), 200, "answers before the flood");
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let idle = (0..count)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    (child, url, log, idle)
}

#[test]
fn running_out_of_file_descriptors_backs_off_instead_of_spinning() {
    // The gateway (and its built-in server) under a limit of 64 open files, with a cap above
    // it, so the flood reaches the limit (by default the cap stays below it and no accept
    // fails). 100 idle connections: the kernel queues them, the gateway runs out of
    // descriptors accepting them.
    let (mut child, url, log, idle) = idle_flood(64, 100, &["--max-connections", "1000"]);
    // The measure: what the gateway writes in 1.5 s of exhaustion. A loop that retries at once
    // logs a line per failed accept, tens of megabytes a second.
    std::thread::sleep(Duration::from_millis(1500));
    let logged: usize = log.lock().unwrap().iter().map(|l| l.len() + 1).sum();
    assert!(
        logged < 64 * 1024,
        "{logged} bytes of log in 1.5 s of exhausted descriptors"
    );
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("accepting a connection failed") && l.contains("ulimit")),
        "the warning names the cause: {:?}",
        log.lock().unwrap()
    );

    // Once the idle clients go, the gateway answers again within its back-off (at most 1 s).
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if initialize_status(&url) == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not recover: {:?}",
            log.lock().unwrap().iter().rev().take(5).collect::<Vec<_>>()
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// POSTs `body` as JSON to the gateway's MCP endpoint; returns the status and the body.
fn post_raw(url: &str, body: &str) -> (u16, String) {
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A body that is not JSON is a JSON-RPC parse error (-32700) and JSON that is not a
/// JSON-RPC message an invalid request (-32600), each in HTTP 400 with the reason: not 415,
/// which tells a client its Content-Type was wrong when it was right.
#[test]
fn unreadable_bodies_get_json_rpc_errors_not_415() {
    let tether = env!("CARGO_BIN_EXE_tether");
    let mut command = Command::new(tether);
    command.args(["serve", "--http", "127.0.0.1:0"]);
    let (mut child, url) = test_support::spawn_http_gateway(&mut command);
    for (body, code) in [
        (r#"{"jsonrpc": "2.0", "id": 1, "method":"#, -32700),
        ("[1, 2, 3]", -32600),
    ] {
        let (status, answer) = post_raw(&url, body);
        assert_eq!(status, 400, "{body}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("{body}: not JSON ({e}): {answer}"));
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One raw HTTP request to the MCP endpoint: the status, the session id it set, and the body.
fn exchange(
    url: &str,
    method: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    exchange_as(url, None, method, session, body)
}

/// [`exchange`] with a bearer token.
fn exchange_as(
    url: &str,
    token: Option<&str>,
    method: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut session = session
        .map(|id| format!("Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    if let Some(token) = token {
        session.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    // The head and the first event are enough; an SSE answer may stay open.
    while let Ok(n) = stream.read(&mut buffer) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&response);
        if text.contains("\"jsonrpc\"")
            || (text.contains("\r\n\r\n") && !text.contains("event-stream"))
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let session = text.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_string())
    });
    (status, session, text)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;

/// A client that opens session after session is stopped at its cap (429, in words), the
/// gateway at its total (503), an ended session makes room, `/metrics` counts the open ones,
/// and a flood of 60,000 attempts leaves the gateway's memory under 200 MB.
#[test]
fn a_session_flood_stops_at_the_caps_and_memory_stays_bounded() {
    let tether = env!("CARGO_BIN_EXE_tether");
    let mut command = Command::new(tether);
    command.args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--max-sessions-per-client",
        "3",
    ]);
    let (mut child, url) = test_support::spawn_http_gateway(&mut command);
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let (status, session, text) = exchange(&url, "POST", None, INITIALIZE);
        assert_eq!(status, 200, "{text}");
        sessions.push(session.expect("a session id"));
    }
    let (status, _, text) = exchange(&url, "POST", None, INITIALIZE);
    assert_eq!(status, 429, "{text}");
    assert!(
        text.contains("has 3 sessions open") && text.contains("--max-sessions-per-client"),
        "{text}"
    );
    let metrics = get(&url, "/metrics");
    assert!(metrics.contains("tether_http_sessions_open 3"), "{metrics}");
    let (status, _, text) = exchange(&url, "DELETE", Some(&sessions[0]), "");
    assert_eq!(status, 200, "{text}");
    let (status, _, text) = exchange(&url, "POST", None, INITIALIZE);
    assert_eq!(status, 200, "an ended session makes room: {text}");
    // The flood, as the probe sent it: 60,000 attempts (4 clients on keep-alive connections).
    // Every attempt past the cap is refused, and refused sessions are not kept.
    let floods: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || initialize_flood(&url, 15_000))
        })
        .collect();
    for flood in floods {
        let statuses = flood.join().unwrap();
        assert!(statuses.iter().all(|s| *s == 429), "{:?}", &statuses[..10]);
    }
    let peak = test_support::peak_rss_kib(child.id()).unwrap_or(0);
    assert!(
        peak < 200 * 1024,
        "peak RSS {peak} KiB after 60,000 attempts"
    );
    let _ = child.kill();
    let _ = child.wait();

    let mut command = Command::new(tether);
    command.args(["serve", "--http", "127.0.0.1:0", "--max-sessions", "2"]);
    let (mut child, url) = test_support::spawn_http_gateway(&mut command);
    for _ in 0..2 {
        assert_eq!(exchange(&url, "POST", None, INITIALIZE).0, 200);
    }
    let (status, _, text) = exchange(&url, "POST", None, INITIALIZE);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("--max-sessions"), "{text}");
    let _ = child.kill();
    let _ = child.wait();
}

/// `count` initializes on one keep-alive connection, each answer read whole: their statuses.
fn initialize_flood(url: &str, count: usize) -> Vec<u16> {
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = std::io::BufReader::new(TcpStream::connect(address).unwrap());
    stream
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    (0..count)
        .map(|_| {
            use std::io::BufRead;
            stream.get_mut().write_all(request.as_bytes()).unwrap();
            let mut status = String::new();
            stream.read_line(&mut status).unwrap();
            let mut length = 0;
            loop {
                let mut header = String::new();
                stream.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            stream.read_exact(&mut body).unwrap();
            status.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
        })
        .collect()
}

/// A session belongs to the token that opened it: another token can neither use it nor end it
/// (404, as for an unknown session), and the owner's session goes on.
#[test]
fn a_session_belongs_to_the_token_that_opened_it() {
    let tether = env!("CARGO_BIN_EXE_tether");
    let mut command = Command::new(tether);
    command.args(["serve", "--http", "127.0.0.1:0"]).env(
        "TETHER_SERVE_TOKENS",
        "alice-token-0123456789, bob-token-0123456789",
    );
    let (mut child, url) = test_support::spawn_http_gateway(&mut command);
    let alice = Some("alice-token-0123456789");
    let bob = Some("bob-token-0123456789");
    let (status, session, text) = exchange_as(&url, alice, "POST", None, INITIALIZE);
    assert_eq!(status, 200, "{text}");
    let session = session.expect("a session id");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, text) = exchange_as(&url, alice, "POST", Some(&session), initialized);
    assert_eq!(status, 202, "{text}");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    let (status, _, text) = exchange_as(&url, bob, "POST", Some(&session), list);
    assert_eq!(status, 404, "another token's session: {text}");
    assert!(text.contains("belongs to another client"), "{text}");
    let (status, _, text) = exchange_as(&url, bob, "DELETE", Some(&session), "");
    assert_eq!(status, 404, "another token cannot end it: {text}");
    let (status, _, text) = exchange_as(&url, alice, "POST", Some(&session), list);
    assert_eq!(status, 200, "the owner's session goes on: {text}");
    assert!(text.contains("\"tools\""), "{text}");
    let _ = child.kill();
    let _ = child.wait();
}

/// 1,000 idle sockets against a gateway allowed 256 descriptors: the connection cap (the limit
/// less a reserve) closes the longest-idle ones as new ones come, so the gateway never runs out
/// of descriptors, answers others within 100 ms, and logs a few lines, not one per socket.
#[test]
fn a_thousand_idle_sockets_leave_the_gateway_answering_others() {
    let (mut child, url, log, idle) = idle_flood(256, 1_000, &[]);
    // Each answer while the 1,000 are held (the first waits behind their accepts).
    let mut took: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            assert_eq!(initialize_status(&url), 200, "answers during the flood");
            started.elapsed()
        })
        .collect();
    took.sort();
    assert!(
        took[2] < Duration::from_millis(100),
        "answers took {took:?}"
    );
    let metrics = get(&url, "/metrics");
    let open: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tether_http_connections_open "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        open <= 256 - 128,
        "{open} connections open under a cap of 128"
    );
    drop(idle);
    let lines = log.lock().unwrap();
    let logged: usize = lines.iter().map(|l| l.len() + 1).sum();
    assert!(logged < 1024 * 1024, "{logged} bytes of log");
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("accepting a connection failed")),
        "the gateway ran out of descriptors: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("--max-connections")),
        "the warning names the cap's flag: {lines:?}"
    );
    drop(lines);
    let _ = child.kill();
    let _ = child.wait();
}

/// A plain GET of `path` on the gateway, its whole answer.
fn get(url: &str, path: &str) -> String {
    test_support::raw_get(url, path)
}

/// Request bodies sent slowly hold their connections, not their client's requests in flight:
/// with 8 bodies half-sent and a limit of 4 in flight, the same address is still answered.
#[test]
fn slow_request_bodies_hold_no_request_slots() {
    let tether = env!("CARGO_BIN_EXE_tether");
    let mut command = Command::new(tether);
    command.args(["serve", "--http", "127.0.0.1:0", "--max-in-flight", "4"]);
    let (mut child, url) = test_support::spawn_http_gateway(&mut command);
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut stream = TcpStream::connect(address).unwrap();
            write!(
                stream,
                "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\":"
            )
            .unwrap();
            stream
        })
        .collect();
    // Each half-sent body has reached the gateway before the real request goes.
    std::thread::sleep(Duration::from_millis(300));
    let (status, _, text) = exchange(&url, "POST", None, INITIALIZE);
    assert_eq!(status, 200, "{text}");
    drop(slow);
    let _ = child.kill();
    let _ = child.wait();
}

/// A client that asks for large answers (12 MB) and reads none of them loses its connections
/// after the write-stall timeout, and the answers with them, instead of holding them for ever.
#[test]
fn unread_answers_are_dropped_with_their_connections_after_the_stall_timeout() {
    let tether = env!("CARGO_BIN_EXE_tether");
    let mut command = Command::new(tether);
    command.args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--no-prefix",
        "--write-stall-timeout",
        "2",
        "--stdio",
        &format!("big={}", test_support::misbehaving_stdio("big-result")),
    ]);
    let (mut child, url, log) = test_support::spawn_http_gateway_logged(&mut command);
    let (status, session, text) = exchange(&url, "POST", None, INITIALIZE);
    assert_eq!(status, 200, "{text}");
    let session = session.expect("a session id");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(exchange(&url, "POST", Some(&session), initialized).0, 202);
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let unread: Vec<TcpStream> = (0..8)
        .map(|i| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"boom","arguments":{{}}}}}}"#,
                i + 10
            );
            let mut stream = TcpStream::connect(address).unwrap();
            write!(
                stream,
                "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            stream
        })
        .collect();
    // The gateway gives up on each within the timeout (2 s) and a check's tick, and counts it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = get(&url, "/metrics");
        if metrics.contains("tether_http_connections_closed_total{reason=\"stalled\"} 8") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{metrics}\n{:?}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // What the client reads now is what the kernel had buffered, then the end.
    for mut stream in unread {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut received = Vec::new();
        let read = stream.read_to_end(&mut received);
        assert!(
            !matches!(&read, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "the connection is still open after {} bytes",
            received.len()
        );
        assert!(
            received.len() < 12_000_000,
            "the whole answer ({} bytes) waited for the client",
            received.len()
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
