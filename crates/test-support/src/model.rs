//! A scripted model server: real HTTP on 127.0.0.1 that speaks the OpenAI Chat Completions,
//! Anthropic Messages and Ollama chat wire formats (streaming included, one event per write),
//! replays a script of replies in order and records every request it received.
//!
//! Tests assert on the recorded requests (history order, roles, call-id pairing, tool
//! schemas, what the model was told after an error), so the server never interprets them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// Which wire format the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `POST /v1/chat/completions`, SSE.
    OpenAi,
    /// `POST /v1/messages`, SSE with named events.
    Anthropic,
    /// `POST /api/chat`, newline-delimited JSON.
    Ollama,
}

/// A one-way latch between a test and the scripted server: the server waits on it (at most
/// a minute, so a test that forgets to open it fails instead of hanging), the test opens it.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Opens the gate; every waiter goes on.
    pub fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock().expect("lock") = true;
        changed.notify_all();
    }

    fn wait(&self) {
        let (open, changed) = &*self.0;
        let guard = open.lock().expect("lock");
        let _ = changed
            .wait_timeout_while(guard, Duration::from_secs(60), |open| !*open)
            .expect("lock");
    }
}

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A plain answer, streamed in small pieces.
    Text(String),
    /// Tool calls `(id, name, arguments JSON text)`, optionally after some text.
    ToolCalls {
        /// Text before the calls.
        text: String,
        /// The calls.
        calls: Vec<(String, String, String)>,
    },
    /// The first piece of `text`, then nothing for a minute: a stream the client must
    /// cancel.
    Stalled(String),
    /// `reply`, once the test opens `gate` (to see what the client shows while it waits,
    /// without racing a timer).
    Held {
        /// Opened by the test when it has seen what it waits for.
        gate: Gate,
        /// What then comes.
        reply: Box<Reply>,
    },
    /// The reply this function makes of the request's body: for a model that must answer
    /// with something only the request tells (a file name the client chose).
    FromRequest(fn(&Value) -> Reply),
    /// A raw HTTP response, for errors.
    Http {
        /// Status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// Body.
        body: String,
    },
}

impl Reply {
    /// A text answer.
    pub fn text(text: &str) -> Reply {
        Reply::Text(text.to_string())
    }

    /// One tool call.
    pub fn call(id: &str, name: &str, arguments: &str) -> Reply {
        Reply::calls(&[(id, name, arguments)])
    }

    /// Several tool calls in one answer.
    pub fn calls(calls: &[(&str, &str, &str)]) -> Reply {
        Reply::ToolCalls {
            text: String::new(),
            calls: calls
                .iter()
                .map(|(i, n, a)| (i.to_string(), n.to_string(), a.to_string()))
                .collect(),
        }
    }

    /// An HTTP error with a JSON body.
    pub fn error(status: u16, body: Value) -> Reply {
        Reply::Http {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request path.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Parsed JSON body.
    pub body: Value,
    /// When its body had been read (benchmarks time the first request of a run by it).
    pub received: std::time::Instant,
}

impl Recorded {
    /// The names of the tools an OpenAI-format request offered, in order.
    pub fn offered_tools(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The running server; stops accepting when dropped.
pub struct ScriptedModel {
    port: u16,
    wire: Wire,
    recorded: Arc<Mutex<Vec<Recorded>>>,
}

impl ScriptedModel {
    /// Starts serving `script` in `wire` format.
    pub fn start(wire: Wire, script: Vec<Reply>) -> ScriptedModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.into_iter()));
        let log = recorded.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let log = log.clone();
                let script = script.clone();
                std::thread::spawn(move || serve(stream, wire, &log, &script));
            }
        });
        ScriptedModel {
            port,
            wire,
            recorded,
        }
    }

    /// The base URL to give Tether (`--base-url`).
    pub fn base_url(&self) -> String {
        match self.wire {
            Wire::OpenAi => format!("http://127.0.0.1:{}/v1", self.port),
            Wire::Anthropic | Wire::Ollama => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().expect("lock").clone()
    }
}

type Script = Mutex<std::vec::IntoIter<Reply>>;

fn serve(stream: TcpStream, wire: Wire, log: &Mutex<Vec<Recorded>>, script: &Script) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_string();
            if name == "content-length" {
                length = value.parse().unwrap_or(0);
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().expect("lock").push(Recorded {
        path,
        headers,
        body,
        received: std::time::Instant::now(),
    });
    let mut reply = script.lock().expect("lock").next();
    if let Some(Reply::Held { gate, reply: later }) = reply {
        gate.wait();
        reply = Some(*later);
    }
    if let Some(Reply::FromRequest(make)) = reply {
        let last = log.lock().expect("lock").last().map(|r| r.body.clone());
        reply = Some(make(&last.unwrap_or_default()));
    }
    let mut out = stream;
    match reply {
        None => write_plain(
            &mut out,
            500,
            &[],
            &json!({"error": {"message": "scripted model: script exhausted"}}).to_string(),
        ),
        Some(Reply::Http {
            status,
            headers,
            body,
        }) => write_plain(&mut out, status, &headers, &body),
        Some(reply) => write_stream(&mut out, wire, &reply),
    }
}

fn write_plain(out: &mut TcpStream, status: u16, headers: &[(String, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body.as_bytes());
}

/// Splits text into pieces of a few characters, so clients must join deltas.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(6).map(|c| c.iter().collect()).collect()
}

fn write_stream(out: &mut TcpStream, wire: Wire, reply: &Reply) {
    let content_type = if wire == Wire::Ollama {
        "application/x-ndjson"
    } else {
        "text/event-stream"
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
    );
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    let (text, calls) = match reply {
        Reply::Text(text) => (text.clone(), Vec::new()),
        Reply::ToolCalls { text, calls } => (text.clone(), calls.clone()),
        Reply::Stalled(text) => {
            let frames = match wire {
                Wire::OpenAi => openai_frames(text, &[]),
                Wire::Anthropic => anthropic_frames(text, &[]),
                Wire::Ollama => ollama_frames(text, &[]),
            };
            // The opening frames and the first piece, then silence until the client leaves.
            for frame in frames.iter().take(2) {
                if out.write_all(frame.as_bytes()).is_err() || out.flush().is_err() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        Reply::Http { .. } | Reply::Held { .. } | Reply::FromRequest(_) => return,
    };
    let frames = match wire {
        Wire::OpenAi => openai_frames(&text, &calls),
        Wire::Anthropic => anthropic_frames(&text, &calls),
        Wire::Ollama => ollama_frames(&text, &calls),
    };
    for frame in frames {
        if out.write_all(frame.as_bytes()).is_err() || out.flush().is_err() {
            return;
        }
    }
}

fn openai_frames(text: &str, calls: &[(String, String, String)]) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1767225600, "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in pieces(text) {
        frames.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        frames.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in pieces(arguments) {
            frames.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    frames.push(chunk(json!({}), json!(finish)));
    let usage = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1767225600, "model": "scripted",
        "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}});
    frames.push(format!("data: {usage}\n\n"));
    frames.push("data: [DONE]\n\n".into());
    frames
}

fn anthropic_frames(text: &str, calls: &[(String, String, String)]) -> Vec<String> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut frames = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message", "role": "assistant",
            "content": [], "model": "scripted", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        event("ping", json!({"type": "ping"})),
    ];
    let mut index = 0;
    if !text.is_empty() {
        frames.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for piece in pieces(text) {
            frames.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
        }
        frames.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (id, name, arguments) in calls {
        frames.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        for piece in pieces(arguments) {
            frames.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
        }
        frames.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    frames.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 7}})));
    frames.push(event("message_stop", json!({"type": "message_stop"})));
    frames
}

fn ollama_frames(text: &str, calls: &[(String, String, String)]) -> Vec<String> {
    let line = |message: Value, done: bool| {
        let mut v = json!({"model": "scripted", "created_at": "2026-01-01T00:00:00Z", "message": message, "done": done});
        if done {
            v["done_reason"] = json!("stop");
            v["total_duration"] = json!(1000);
            v["prompt_eval_count"] = json!(11);
            v["eval_count"] = json!(7);
        }
        format!("{v}\n")
    };
    let mut frames: Vec<String> = pieces(text)
        .into_iter()
        .map(|p| line(json!({"role": "assistant", "content": p}), false))
        .collect();
    if !calls.is_empty() {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(_, name, arguments)| {
                let args: Value =
                    serde_json::from_str(arguments).unwrap_or_else(|_| json!(arguments));
                json!({"function": {"name": name, "arguments": args}})
            })
            .collect();
        frames.push(line(
            json!({"role": "assistant", "content": "", "tool_calls": tool_calls}),
            false,
        ));
    }
    frames.push(line(json!({"role": "assistant", "content": ""}), true));
    frames
}
