//! The floor of a proxied call on this machine, for the gateway benchmark (issue 27): the
//! least an HTTP-to-stdio proxy must do for one `tools/call`. One HTTP/1.1 request read off a
//! loopback socket (a hand-rolled parser: no framework), its id swapped for one of its own, one
//! line to the stdio child and one back, the client's id put back, one HTTP answer written.
//! It answers the handshake itself (`initialize` with a session id, `server/discover` refused so
//! clients fall back to it) and checks nothing: a measure, not a server to use.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc, oneshot};

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// Starts the floor proxy in front of `program args` on its own two-thread runtime (as the
/// gateway's); returns its URL. It lives as long as the process.
pub fn start(program: &str, args: &[&str]) -> String {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("floor")
        .enable_all()
        .build()
        .unwrap();
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let program = program.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let thread = std::thread::Builder::new().name("floor".into());
    let _ = thread.spawn(move || {
        runtime.block_on(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (child, mut stdin, mut stdout) =
                crate::raw_client::start_initialized(&program, &args).await;
            let waiting: Waiting = Arc::default();
            let (lines, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
            tokio::spawn(async move {
                while let Some(line) = outgoing.recv().await {
                    if stdin.write_all(&line).await.is_err() {
                        break;
                    }
                }
            });
            let answers = waiting.clone();
            tokio::spawn(async move {
                let _child = child;
                while let Ok(Some(line)) = stdout.next_line().await {
                    let Ok(message) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    if let Some(id) = message.get("id").and_then(Value::as_u64)
                        && let Some(answer) = answers.lock().await.remove(&id)
                    {
                        let _ = answer.send(message);
                    }
                }
            });
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            url_tx.send(format!("http://127.0.0.1:{port}/mcp")).unwrap();
            let next = Arc::new(AtomicU64::new(1));
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (waiting, lines, next) = (waiting.clone(), lines.clone(), next.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    while let Some((method, body)) = read_request(&mut read).await {
                        let answer = answer(&method, &body, &waiting, &lines, &next).await;
                        if write.write_all(&answer).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    });
    url_rx.recv().unwrap()
}

/// The next request on the connection: its method and body.
async fn read_request(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Option<(String, Vec<u8>)> {
    let mut line = String::new();
    read.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
    let method = line.split(' ').next()?.to_string();
    let mut length = 0;
    loop {
        line.clear();
        read.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    read.read_exact(&mut body).await.ok()?;
    Some((method, body))
}

/// The HTTP answer to one request.
async fn answer(
    method: &str,
    body: &[u8],
    waiting: &Waiting,
    lines: &mpsc::UnboundedSender<Vec<u8>>,
    next: &AtomicU64,
) -> Vec<u8> {
    let respond = |status: &str, extra: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    if method != "POST" {
        return respond("405 Method Not Allowed", "", "");
    }
    let Ok(mut message) = serde_json::from_slice::<Value>(body) else {
        return respond("400 Bad Request", "", "");
    };
    let Some(client_id) = message.get("id").cloned() else {
        return respond("202 Accepted", "", "");
    };
    match message.get("method").and_then(Value::as_str) {
        Some("initialize") => {
            let result = json!({"jsonrpc": "2.0", "id": client_id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "floor", "version": "0"}}});
            return respond("200 OK", "mcp-session-id: floor\r\n", &result.to_string());
        }
        Some("server/discover") => {
            let refusal = json!({"jsonrpc": "2.0", "id": client_id,
                "error": {"code": -32601, "message": "method not found"}});
            return respond("200 OK", "", &refusal.to_string());
        }
        _ => {}
    }
    let id = next.fetch_add(1, Ordering::Relaxed);
    message["id"] = json!(id);
    let (sender, receiver) = oneshot::channel();
    waiting.lock().await.insert(id, sender);
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    let _ = lines.send(line);
    let Ok(mut reply) = receiver.await else {
        return respond("502 Bad Gateway", "", "");
    };
    reply["id"] = client_id;
    respond("200 OK", "", &reply.to_string())
}
