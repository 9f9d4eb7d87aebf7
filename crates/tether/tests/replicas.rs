//! `tether serve` past one machine: replicas that share a session key serve each other's
//! 2025-11-25 sessions (the session id is sealed state, not a key into memory), so a plain
//! round-robin load balancer needs no sticky sessions and no shared store. Tested with raw
//! requests sent to two replicas directly, and with the official Python SDK client through
//! HAProxy (from the Debian packages, installed by the test command) in front of three
//! replicas, one of which is killed part-way. Also what running a replica needs: `/metrics`,
//! `/readyz`, per-client limits on requests in flight, and a shutdown that drains them.

// Benchmarks and tests report to their runner: the binary's terminal sink is not theirs.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::{everything_stdio, scratch_dir, workspace_root};

/// A replica or client scenario takes seconds; a hang fails the test instead of CI.
const DEADLINE: Duration = Duration::from_secs(180);

const SECRET: &str = "replicas share this secret, 32+ chars";

fn tether() -> &'static str {
    env!("CARGO_BIN_EXE_tether")
}

/// One `tether serve --http` in front of the built-in server.
struct Replica {
    child: Child,
    /// `127.0.0.1:PORT`.
    address: String,
}

impl Replica {
    /// A replica in front of the built-in server.
    fn start(secret: &str) -> Replica {
        Replica::start_with(
            &format!("builtin={} builtin-server", tether()),
            &[],
            &[("TETHER_SESSION_KEY", secret)],
        )
    }

    fn start_with(upstream: &str, args: &[&str], env: &[(&str, &str)]) -> Replica {
        let (child, url) = test_support::spawn_http_gateway(
            Command::new(tether())
                .args(["serve", "--http", "127.0.0.1:0", "--stdio", upstream])
                .args(args)
                .envs(env.iter().copied()),
        );
        let address = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string();
        Replica { child, address }
    }

    fn port(&self) -> u16 {
        self.address.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a raw POST to `/mcp` got back.
struct Answer {
    status: u16,
    session: Option<String>,
    /// The JSON-RPC message in the body (plain JSON or the first SSE `data:` event).
    message: Option<Value>,
}

/// POSTs one JSON-RPC message to `address`, reading until the answer to it has arrived.
fn post(address: &str, body: &Value, session: Option<&str>) -> Answer {
    post_with(address, body, session, &[])
}

fn post_with(
    address: &str,
    body: &Value,
    session: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    let body = body.to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(session) = session {
        request.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&raw).to_string();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
            let session = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| value.trim().to_string())
            });
            let message = rest
                .lines()
                .map(|line| line.strip_prefix("data:").unwrap_or(line).trim())
                .find_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|m| m.get("id").is_some());
            let done = message.is_some() || status != 200;
            if done {
                return Answer {
                    status,
                    session,
                    message,
                };
            }
        }
        let n = stream.read(&mut buffer).unwrap();
        if n == 0 {
            let text = String::from_utf8_lossy(&raw).to_string();
            let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
            return Answer {
                status,
                session: None,
                message: None,
            };
        }
        raw.extend_from_slice(&buffer[..n]);
    }
}

fn initialize(address: &str) -> String {
    initialize_with(address, &[])
}

fn initialize_with(address: &str, headers: &[(&str, &str)]) -> String {
    let answer = post_with(
        address,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        None,
        headers,
    );
    assert_eq!(answer.status, 200);
    let session = answer.session.expect("a session id");
    let initialized = post_with(
        address,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&session),
        headers,
    );
    assert_eq!(initialized.status, 202);
    session
}

/// A GET on `path`: the status and the body.
fn get(address: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text.split_once("\r\n\r\n").unwrap().1.to_string())
}

/// The value of one sample line in Prometheus text (`name{labels} value`).
fn sample(metrics: &str, line_start: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|line| line.starts_with(line_start))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn add(address: &str, session: &str, a: i64, b: i64) -> Answer {
    post(
        address,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "builtin__add", "arguments": {"a": a, "b": b}}}),
        Some(session),
    )
}

fn sum_text(answer: &Answer) -> String {
    answer.message.as_ref().unwrap()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_session_made_on_one_replica_is_served_by_another() {
    let (a, b) = (Replica::start(SECRET), Replica::start(SECRET));
    let session = initialize(&a.address);
    // The id is sealed state, not rmcp's UUID.
    assert!(session.len() > 100, "{session}");
    // B never saw the session and still serves it, as often as asked; so does A.
    for (replica, n) in [(&b, 1), (&b, 2), (&a, 3)] {
        let answer = add(&replica.address, &session, n, 40);
        assert_eq!(answer.status, 200);
        assert_eq!(sum_text(&answer), (n + 40).to_string());
    }
    // A replica with another secret cannot open it: an unknown session.
    let stranger = Replica::start("a different secret, not shared");
    assert_eq!(add(&stranger.address, &session, 1, 1).status, 404);
    // Nor can anyone forge one.
    let mut forged = session.clone().into_bytes();
    let middle = forged.len() / 2;
    forged[middle] = if forged[middle] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        add(&b.address, &String::from_utf8(forged).unwrap(), 1, 1).status,
        404
    );
}

/// A DELETE of a session: its status line's code.
fn delete(address: &str, session: &str) -> u16 {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let request = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {address}\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Ending a session answers 200 (the official Python SDK client logs anything but 200 or 204
/// as a failed termination, on every close), and the session is gone on the replica that ended
/// it.
#[test]
fn ending_a_session_answers_200_and_ends_it() {
    let replica = Replica::start(SECRET);
    let session = initialize(&replica.address);
    assert_eq!(add(&replica.address, &session, 1, 2).status, 200);
    assert_eq!(delete(&replica.address, &session), 200);
    assert_eq!(add(&replica.address, &session, 1, 2).status, 404);
}

/// An upstream that crashes and is started again is in the gateway's own log, not only in the
/// warning its clients hear.
#[test]
fn an_upstream_restart_is_logged() {
    let dir = scratch_dir("replicas", "restart-log");
    let crashed = dir.join("crashed");
    let upstream = format!("crashy={}", test_support::misbehaving_stdio("crash-once"));
    let (child, url, log) = test_support::spawn_http_gateway_logged(
        Command::new(tether())
            .args(["serve", "--http", "127.0.0.1:0", "--stdio", &upstream])
            .env("CRASHED", &crashed),
    );
    // Killed however the test ends, a failed assertion included.
    let _gateway = Replica {
        child,
        address: String::new(),
    };
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let session = initialize(&address);
    let boom = || {
        post(
            &address,
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "crashy__boom", "arguments": {}}}),
            Some(&session),
        )
    };
    // The first call dies with the process; the next one starts it again and is answered.
    let _ = boom();
    let answer = boom();
    assert_eq!(answer.status, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    let logged = loop {
        let lines = log.lock().unwrap().clone();
        if let Some(line) = lines.iter().find(|l| l.contains("restarted")) {
            break line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no restart in the log: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        logged.contains("crashy") && logged.contains("WARN"),
        "{logged}"
    );
}

/// `/metrics` is held to the Host and Origin checks of the MCP path even on a token-less
/// loopback gateway: a DNS-rebinding page (a foreign Host, or a foreign Origin) cannot read it.
#[test]
fn metrics_refuse_a_foreign_host_or_origin() {
    let replica = Replica::start(SECRET);
    let status = |host: &str, origin: Option<&str>| -> u16 {
        let mut stream = TcpStream::connect(&replica.address).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut request = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if let Some(origin) = origin {
            request.push_str(&format!("Origin: {origin}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let own = replica.address.clone();
    assert_eq!(status(&own, None), 200);
    assert_eq!(status(&format!("localhost:{}", replica.port()), None), 200);
    assert_eq!(status(&own, Some(&format!("http://{own}"))), 200);
    assert_eq!(status("evil.example", None), 403);
    assert_eq!(
        status(&format!("evil.example:{}", replica.port()), None),
        403
    );
    assert_eq!(status(&own, Some("http://evil.example")), 403);
}

/// HAProxy round-robin in front of `replicas`, with health checks and its statistics page.
struct LoadBalancer {
    child: Child,
    port: u16,
}

impl LoadBalancer {
    fn start(replicas: &[Replica]) -> LoadBalancer {
        let haproxy = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("haproxy is installed (scripts/install-system.sh)");
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let servers: String = replicas
            .iter()
            .enumerate()
            .map(|(i, r)| format!("  server r{i} 127.0.0.1:{} check\n", r.port()))
            .collect();
        let config = format!(
            "global\n  maxconn 512\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\n  retries 3\n  option redispatch\nfrontend mcp\n  bind 127.0.0.1:{port}\n  stats enable\n  stats uri /stats\n  default_backend replicas\nbackend replicas\n  balance roundrobin\n  option httpchk GET /healthz\n  default-server inter 300ms fall 1 rise 2\n{servers}"
        );
        let dir = scratch_dir("replicas", "haproxy");
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < DEADLINE, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let balancer = LoadBalancer { child, port };
        // Clients start only once every replica has passed its health checks: before that
        // HAProxy may answer 503, and a busy machine makes that window long.
        while balancer
            .statistics()
            .iter()
            .filter(|row| row.server.starts_with('r'))
            .any(|row| row.status != "UP")
            || balancer.statistics().is_empty()
        {
            assert!(
                started.elapsed() < DEADLINE,
                "the replicas never came up in HAProxy"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        balancer
    }

    /// 2xx responses HAProxy got from each replica (`r0`, `r1`, …), from its CSV statistics.
    fn answers_per_replica(&self) -> Vec<(String, u64)> {
        self.statistics()
            .into_iter()
            .filter(|row| row.server.starts_with('r'))
            .map(|row| (row.server, row.answered))
            .collect()
    }

    /// The rows of the `replicas` backend in HAProxy's CSV statistics (empty while it cannot
    /// be read).
    fn statistics(&self) -> Vec<BackendRow> {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return Vec::new();
        };
        let mut text = String::new();
        if write!(stream, "GET /stats;csv HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err()
            || stream.read_to_string(&mut text).is_err()
        {
            return Vec::new();
        }
        let Some((head, mut rest)) = text.split_once("\r\n\r\n") else {
            return Vec::new();
        };
        // HAProxy answers in chunks even to HTTP/1.0.
        let mut body = String::new();
        if head.to_lowercase().contains("transfer-encoding: chunked") {
            while let Some((size, after)) = rest.split_once("\r\n") {
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                body.push_str(&after[..size]);
                rest = after[size..].trim_start_matches("\r\n");
            }
        } else {
            body.push_str(rest);
        }
        let mut lines = body.lines();
        let Some(header) = lines.next() else {
            return Vec::new();
        };
        let header: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
        let column = |name: &str| header.iter().position(|h| *h == name);
        let (Some(proxy), Some(server), Some(status), Some(ok)) = (
            column("pxname"),
            column("svname"),
            column("status"),
            column("hrsp_2xx"),
        ) else {
            return Vec::new();
        };
        lines
            .map(|line| line.split(',').collect::<Vec<_>>())
            .filter(|f| f.len() > ok.max(status) && f[proxy] == "replicas")
            .map(|f| BackendRow {
                server: f[server].to_string(),
                status: f[status].to_string(),
                answered: f[ok].parse().unwrap_or(0),
            })
            .collect()
    }
}

/// One server row of HAProxy's statistics.
struct BackendRow {
    server: String,
    status: String,
    answered: u64,
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn three_replicas_behind_haproxy_answer_every_call_while_one_dies() {
    let mut replicas = vec![
        Replica::start(SECRET),
        Replica::start(SECRET),
        Replica::start(SECRET),
    ];
    let balancer = LoadBalancer::start(&replicas);
    let url = format!("http://127.0.0.1:{}/mcp", balancer.port);
    let python = workspace_root().join("peers/.venv/bin/python");
    let script = workspace_root().join("peers/clients/replica_client.py");
    let spawn = |mode: &str| {
        Command::new(&python)
            .arg(&script)
            .args([mode, &url, "200"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Python SDK is installed (scripts/install-peers.sh)")
    };
    let (mut legacy, mut modern) = (spawn("legacy"), spawn("auto"));
    let lines = |child: &mut Child| {
        let (sender, receiver) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        receiver
    };
    let (legacy_lines, modern_lines) = (lines(&mut legacy), lines(&mut modern));
    // Part-way through the legacy client's calls, one replica dies without a word.
    let mut legacy_report = None;
    let started = Instant::now();
    while legacy_report.is_none() {
        assert!(started.elapsed() < DEADLINE, "the legacy client hangs");
        let Ok(line) = legacy_lines.recv_timeout(DEADLINE) else {
            panic!("the legacy client stopped without a report");
        };
        if line == "progress 80" {
            let before = balancer.answers_per_replica();
            assert!(
                before.iter().all(|(_, n)| *n > 0),
                "calls land on every replica: {before:?}"
            );
            let victim = &mut replicas[1];
            victim.child.kill().unwrap();
            victim.child.wait().unwrap();
        }
        if line.starts_with('{') {
            legacy_report = Some(serde_json::from_str::<Value>(&line).unwrap());
        }
    }
    let modern_report: Value = loop {
        let line = modern_lines
            .recv_timeout(DEADLINE)
            .expect("the 2026-07-28 client reports");
        if line.starts_with('{') {
            break serde_json::from_str(&line).unwrap();
        }
    };
    for (report, version) in [
        (legacy_report.unwrap(), "2025-11-25"),
        (modern_report, "2026-07-28"),
    ] {
        eprintln!("{version}: {report}");
        assert_eq!(report["protocol_version"], version, "{report}");
        assert_eq!(report["answered"], 200, "{report}");
        assert_eq!(report["failed"], 0, "{report}");
        // At most the one connection the killed replica held drops (the SDK ends the client).
        assert!(report["reconnected"].as_u64() <= Some(1), "{report}");
    }
    let _ = legacy.wait();
    let _ = modern.wait();
    let after = balancer.answers_per_replica();
    assert_eq!(after.len(), 3, "{after:?}");
    eprintln!("answers per replica (HAProxy): {after:?}");
}

#[test]
fn metrics_and_readiness_report_calls_upstream_health_and_need_the_token() {
    let replica = Replica::start_with(
        &format!("builtin={} builtin-server", tether()),
        &[],
        &[("TETHER_SERVE_TOKENS", "ops-token-0123456789")],
    );
    let auth = [("Authorization", "Bearer ops-token-0123456789")];
    assert_eq!(get(&replica.address, "/readyz", &[]), (200, "ready".into()));
    assert_eq!(get(&replica.address, "/metrics", &[]).0, 401);
    let session = initialize_with(&replica.address, &auth);
    for n in 0..3 {
        let answer = post_with(
            &replica.address,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "builtin__add", "arguments": {"a": n, "b": 1}}}),
            Some(&session),
            &auth,
        );
        assert_eq!(sum_text(&answer), (n + 1).to_string());
    }
    let (status, metrics) = get(&replica.address, "/metrics", &auth);
    assert_eq!(status, 200);
    let calls = "tether_tool_calls_total{outcome=\"ok\",server=\"builtin\",tool=\"add\"}";
    assert_eq!(sample(&metrics, calls), Some(3.0), "{metrics}");
    let timed = "tether_tool_call_duration_seconds_count{server=\"builtin\",tool=\"add\"}";
    assert_eq!(sample(&metrics, timed), Some(3.0), "{metrics}");
    let up = "tether_upstream_up{server=\"builtin\"}";
    assert_eq!(sample(&metrics, up), Some(1.0), "{metrics}");
    // initialize, initialized and three calls were answered; the 401 before them counted too.
    let ok = sample(&metrics, "tether_http_requests_total{status=\"200\"}").unwrap();
    assert!(ok >= 4.0, "{metrics}");
    assert_eq!(
        sample(&metrics, "tether_http_requests_in_flight"),
        Some(0.0)
    );
}

#[test]
fn a_client_over_its_limit_gets_429_and_shutdown_answers_the_calls_in_flight() {
    let upstream = format!("everything={}", everything_stdio());
    let replica = Replica::start_with(&upstream, &["--max-in-flight", "1"], &[]);
    let address = replica.address.clone();
    let session = initialize(&address);
    let long_call = |address: String, session: String| {
        post(
            &address,
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
                "name": "everything__trigger-long-running-operation",
                "arguments": {"duration": 2, "steps": 2}}}),
            Some(&session),
        )
    };
    let sum = |address: &str, session: &str| {
        post(
            address,
            &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                "params": {"name": "everything__get-sum", "arguments": {"a": 1, "b": 2}}}),
            Some(session),
        )
    };
    // One at a time is within the limit, and a finished call frees its place.
    assert_eq!(sum(&address, &session).status, 200);
    assert_eq!(sum(&address, &session).status, 200);
    let in_flight = {
        let (address, session) = (address.clone(), session.clone());
        std::thread::spawn(move || long_call(address, session))
    };
    let started = Instant::now();
    while sample(
        &get(&address, "/metrics", &[]).1,
        "tether_http_requests_in_flight",
    ) != Some(1.0)
    {
        assert!(started.elapsed() < DEADLINE, "the long call never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = sum(&address, &session);
    assert_eq!(refused.status, 429);
    // SIGTERM while the long call runs: the listener closes, the call is still answered, and
    // the gateway exits cleanly once it is.
    let pid = replica.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let answered = in_flight.join().unwrap();
    assert_eq!(answered.status, 200);
    let text = answered.message.unwrap()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("Long running operation completed"), "{text}");
    let mut replica = replica;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = replica.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the gateway did not exit after draining"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status:?}");
    assert!(TcpStream::connect(&address).is_err());
}
