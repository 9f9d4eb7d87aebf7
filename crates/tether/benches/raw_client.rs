//! The gateway benchmark's load generator: clients that cost the proxies under test as little
//! as possible, so the figures measure the proxies and not a client. One keep-alive HTTP/1.1
//! connection per client over loopback (a hand-rolled writer and reader: content-length and
//! chunked answers, JSON or SSE), the request written in one `write`, the answer read to its
//! end (so the connection is reused) and checked for a result; and the same calls straight to
//! the stdio server as lines on its pipes (`direct`). The earlier version drove every target
//! through Tether's own client (rmcp over reqwest), whose CPU per call was larger than the
//! proxies' own on this two-core machine and hid their differences.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{Mutex, oneshot};

/// How a client speaks to an HTTP target.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// A 2025-11-25 session: `initialize`, then every request with its `Mcp-Session-Id`.
    Sessions,
    /// 2026-07-28 stateless requests: each carries its protocol version and client in `_meta`.
    Stateless,
}

/// One client's keep-alive connection to a Streamable HTTP endpoint.
pub struct HttpClient {
    stream: BufReader<TcpStream>,
    host: String,
    path: String,
    session: Option<String>,
    era: Era,
    line: String,
}

/// An HTTP answer: status, content type and body (de-chunked).
struct Answer {
    status: u16,
    session: Option<String>,
    body: Vec<u8>,
}

impl HttpClient {
    /// Connects to `url` (`http://HOST:PORT/PATH`) and, for sessions, opens one.
    pub async fn connect(url: &str, era: Era) -> HttpClient {
        let rest = url.strip_prefix("http://").expect("an http:// URL");
        let (host, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        let stream = TcpStream::connect(host).await.expect("connects");
        stream.set_nodelay(true).unwrap();
        let mut client = HttpClient {
            stream: BufReader::with_capacity(16 * 1024, stream),
            host: host.to_string(),
            path: path.to_string(),
            session: None,
            era,
            line: String::new(),
        };
        if era == Era::Sessions {
            let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"}}});
            let answer = client.post(&initialize.to_string(), "").await;
            assert_eq!(answer.status, 200, "initialize: {}", lossy(&answer.body));
            client.session = answer.session;
            let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            let answer = client.post(initialized, "").await;
            assert!(
                answer.status == 202 || answer.status == 200,
                "initialized: HTTP {}",
                answer.status
            );
        }
        client
    }

    /// Calls `tool` with `{"a": a, "b": b}` and checks the answer is a result.
    pub async fn call(&mut self, id: u64, tool: &str, a: u64, b: u64) {
        let (body, headers) = match self.era {
            Era::Sessions => (
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": tool, "arguments": {"a": a, "b": b}}}),
                String::new(),
            ),
            Era::Stateless => (
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": tool, "arguments": {"a": a, "b": b}, "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"}}}}),
                format!(
                    "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
                ),
            ),
        };
        let answer = self.post(&body.to_string(), &headers).await;
        let text = lossy(&answer.body);
        assert!(
            answer.status == 200
                && text.contains("\"result\"")
                && !text.contains("\"isError\":true"),
            "tools/call {tool}: HTTP {} {text}",
            answer.status
        );
    }

    async fn post(&mut self, body: &str, extra: &str) -> Answer {
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n{extra}",
            self.path,
            self.host,
            body.len()
        );
        if let Some(session) = &self.session {
            request.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("the request is written");
        self.read_answer().await
    }

    async fn read_line(&mut self) -> &str {
        self.line.clear();
        let n = self.stream.read_line(&mut self.line).await.expect("reads");
        assert!(n > 0, "the server closed the connection");
        self.line.trim_end_matches(['\r', '\n'])
    }

    async fn read_answer(&mut self) -> Answer {
        let status_line = self.read_line().await.to_string();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a status line: {status_line:?}"));
        let (mut length, mut chunked, mut session) = (None, false, None);
        loop {
            let line = self.read_line().await;
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("mcp-session-id") {
                session = Some(value.to_string());
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let size = usize::from_str_radix(
                    self.read_line().await.split(';').next().unwrap_or("0"),
                    16,
                )
                .expect("a chunk size");
                if size == 0 {
                    // Trailers (none expected), then the blank line.
                    while !self.read_line().await.is_empty() {}
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                self.stream.read_exact(&mut body[start..]).await.unwrap();
                self.read_line().await;
            }
        } else if let Some(length) = length {
            body.resize(length, 0);
            self.stream.read_exact(&mut body).await.unwrap();
        }
        Answer {
            status,
            session,
            body,
        }
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Starts the stdio server `program args` and completes its handshake; its process, stdin and
/// stdout lines.
pub async fn start_initialized(
    program: &str,
    args: &[&str],
) -> (Child, ChildStdin, Lines<BufReader<ChildStdout>>) {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    stdout.next_line().await.unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .unwrap();
    (child, stdin, stdout)
}

/// Clients calling a stdio server directly, sharing its pipes: each line written whole under
/// a lock, each answer routed to its caller by id.
pub struct Direct {
    stdin: Mutex<ChildStdin>,
    waiting: Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<String>>>>,
    next: AtomicU64,
    _child: Child,
}

impl Direct {
    /// Starts `program args` and completes the handshake.
    pub async fn start(program: &str, args: &[&str]) -> Direct {
        let (child, stdin, mut stdout) = start_initialized(program, args).await;
        let waiting: Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<String>>>> = Arc::default();
        let answers = waiting.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                let id = serde_json::from_str::<Value>(&line)
                    .ok()
                    .and_then(|m| m.get("id").and_then(Value::as_u64));
                if let Some(id) = id
                    && let Some(sender) = answers.lock().unwrap().remove(&id)
                {
                    let _ = sender.send(line);
                }
            }
        });
        Direct {
            stdin: Mutex::new(stdin),
            waiting,
            next: AtomicU64::new(1),
            _child: child,
        }
    }

    /// Calls `tool` with `{"a": a, "b": b}` and checks the answer is a result.
    pub async fn call(&self, tool: &str, a: u64, b: u64) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, sender);
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {"a": a, "b": b}}});
        self.stdin
            .lock()
            .await
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let answer = receiver.await.expect("an answer");
        assert!(
            answer.contains("\"result\"") && !answer.contains("\"isError\":true"),
            "{answer}"
        );
    }
}
