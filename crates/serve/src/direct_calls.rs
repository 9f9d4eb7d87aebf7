//! The hot path at the HTTP edge: a plain `tools/call` on an established 2025-11-25 session,
//! or a 2026-07-28 stateless one, is read as far as routing and policy need (method, id, tool
//! name, the client's capabilities and log level; the arguments stay text),
//! handed to the session's service ([`McpService::direct_call`]) and answered as one JSON body,
//! without rmcp's session worker, typed models or SSE framing. Anything else, and any call the
//! service declines, takes the full path through rmcp, which also keeps each session alive
//! (docs/decisions.md, "The gateway's hot path").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::{Request, Response};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tether_mcp::client::Progress;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::http_answers::Body;
use crate::serve::{DirectAnswer, DirectCall, McpService, ModernRequest, SessionListing};
use crate::serve_auth::Principal;

/// The revisions with sessions: a session's request may name only these.
pub(crate) const SESSION_REVISIONS: [&str; 4] =
    ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// A session the hot path may serve: its service, and when the full path last saw it.
struct Registered<S: ?Sized> {
    service: Weak<S>,
    capabilities: Arc<Value>,
    /// Milliseconds since the directory's epoch.
    last_full: AtomicU64,
}

/// Makes the service of a session or of a stateless request.
pub(crate) type Factory<S> = Arc<dyn Fn() -> Arc<S> + Send + Sync>;

/// The sessions whose client finished `initialize`, by local session id, and the one service
/// the hot path shares among 2026-07-28 requests (it keeps nothing between requests there).
pub(crate) struct SessionDirectory<S: ?Sized> {
    sessions: RwLock<HashMap<String, Registered<S>>>,
    factory: Factory<S>,
    stateless: std::sync::OnceLock<Arc<S>>,
    /// rmcp ends a session its worker has not heard from for the idle timeout: a session is
    /// sent the full path at least this often, so the hot path never lets it expire.
    refresh: Duration,
    epoch: Instant,
    /// The size after the last sweep of ended sessions.
    swept: AtomicUsize,
}

impl<S: ?Sized> SessionDirectory<S> {
    /// A directory whose sessions rmcp ends after `idle`; `factory` makes the stateless
    /// service.
    pub(crate) fn new(idle: Duration, factory: Factory<S>) -> SessionDirectory<S> {
        SessionDirectory {
            sessions: RwLock::default(),
            factory,
            stateless: std::sync::OnceLock::new(),
            refresh: idle / 3,
            epoch: Instant::now(),
            swept: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl<S: McpService + ?Sized> SessionListing<S> for SessionDirectory<S> {
    fn register(&self, id: &str, service: &Arc<S>, capabilities: Value) {
        let Ok(mut sessions) = self.sessions.write() else {
            return;
        };
        // Ended sessions leave their entry; they are swept whenever the table doubles.
        if sessions.len() >= 2 * self.swept.load(Ordering::Relaxed).max(64) {
            sessions.retain(|_, s| s.service.strong_count() > 0);
            self.swept.store(sessions.len(), Ordering::Relaxed);
        }
        sessions.insert(
            id.to_string(),
            Registered {
                service: Arc::downgrade(service),
                capabilities: Arc::new(capabilities),
                last_full: AtomicU64::new(self.now()),
            },
        );
    }
}

impl<S: ?Sized> SessionDirectory<S> {
    /// Notes that the full path saw session `id`.
    pub(crate) fn touch(&self, id: &str) {
        if let Ok(sessions) = self.sessions.read()
            && let Some(session) = sessions.get(id)
        {
            session.last_full.store(self.now(), Ordering::Relaxed);
        }
    }

    /// Takes session `id` out (its client ended it).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut sessions) = self.sessions.write() {
            sessions.remove(id);
        }
    }

    /// Whether session `id` is registered and its service still lives.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.sessions.read().is_ok_and(|sessions| {
            sessions
                .get(id)
                .is_some_and(|s| s.service.strong_count() > 0)
        })
    }

    /// The service of session `id` and its client's capabilities, unless the session is not
    /// (or no longer) known or is due a visit of the full path.
    fn lookup(&self, id: &str) -> Option<(Arc<S>, Arc<Value>)> {
        let sessions = self.sessions.read().ok()?;
        let session = sessions.get(id)?;
        let due = self
            .now()
            .saturating_sub(session.last_full.load(Ordering::Relaxed))
            > u64::try_from(self.refresh.as_millis()).unwrap_or(u64::MAX);
        if due {
            return None;
        }
        Some((session.service.upgrade()?, session.capabilities.clone()))
    }
}

/// The JSON-RPC request of a plain call; anything more (a task, input responses, progress, a
/// `_meta` key beyond the four below) and it takes the full path.
#[derive(Deserialize)]
struct PlainRequest<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: PlainParams<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", borrow)]
    meta: Option<PlainMeta<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainMeta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
    protocol_version: Option<&'a str>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
    client_capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientInfo", borrow)]
    _client_info: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow)]
    log_level: Option<&'a str>,
    #[serde(rename = "progressToken", borrow)]
    progress_token: Option<&'a RawValue>,
}

/// The revision whose requests stand alone.
const STATELESS_REVISION: &str = "2026-07-28";

/// A call the hot path took, owning what it was sent, so that its answer can outlive the
/// request's borrowed parts (an SSE answer with progress is sent as the call runs).
struct OwnedCall<S: ?Sized> {
    service: Arc<S>,
    name: String,
    arguments: Option<Box<RawValue>>,
    principal: Option<Principal>,
    capabilities: Arc<Value>,
    modern: Option<(Box<RawValue>, Option<String>)>,
}

impl<S: McpService + ?Sized> OwnedCall<S> {
    async fn run(self, progress: Option<UnboundedSender<Progress>>) -> DirectAnswer {
        self.service
            .direct_call(DirectCall {
                name: &self.name,
                arguments: self.arguments.as_deref(),
                principal: self.principal.as_ref(),
                client_capabilities: &self.capabilities,
                modern: self
                    .modern
                    .as_ref()
                    .map(|(capabilities, level)| ModernRequest {
                        client_capabilities: capabilities,
                        log_level: level.as_deref(),
                    }),
                progress,
            })
            .await
    }
}

/// Serves `request` (already authenticated, its body read, its Host and Origin checked) on the
/// hot path when it is a plain `tools/call`, of session `session` or a 2026-07-28 stateless
/// one (`session` is `None`), and the service takes it; `None` sends it the full way. The
/// answer is one JSON body, unless the client asked for progress and the server reports some
/// before its result: then an SSE stream of the progress and the result.
pub(crate) async fn serve<S: McpService + ?Sized>(
    directory: &SessionDirectory<S>,
    session: Option<&str>,
    request: &Request<http_body_util::Full<Bytes>>,
    body: &Bytes,
) -> Option<Response<Body>> {
    let headers = request.headers();
    let accepts = |kind: &str| {
        headers
            .get_all(hyper::header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains(kind) || v.contains("*/*"))
    };
    if !accepts("application/json") {
        return None;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let version = header("mcp-protocol-version");
    let text = std::str::from_utf8(body).ok()?;
    let call: PlainRequest<'_> = serde_json::from_str(text).ok()?;
    let id = call.id.get();
    let id_ok = id.starts_with('"') || id.starts_with(|c: char| c == '-' || c.is_ascii_digit());
    let arguments_ok = call
        .params
        .arguments
        .is_none_or(|a| a.get().trim_start().starts_with('{'));
    if call.jsonrpc != "2.0" || call.method != "tools/call" || !id_ok || !arguments_ok {
        return None;
    }
    let name = &*call.params.name;
    let meta = call.params.meta.as_ref();
    let token = meta.and_then(|m| m.progress_token);
    if token.is_some() && !accepts("text/event-stream") {
        return None;
    }
    let (service, capabilities, modern) = match session {
        Some(session) => {
            // A session's request carries nothing in `_meta` but, at most, a progress token.
            let stateless_keys = meta.is_some_and(|m| {
                m.protocol_version.is_some()
                    || m.client_capabilities.is_some()
                    || m._client_info.is_some()
                    || m.log_level.is_some()
            });
            if stateless_keys || version.is_some_and(|v| !SESSION_REVISIONS.contains(&v)) {
                return None;
            }
            let (service, capabilities) = directory.lookup(session)?;
            (service, capabilities, None)
        }
        None => {
            let meta = meta?;
            // The request's headers must say what its body says (SEP-2243); a name in base64
            // is left to the full path to decode.
            if version != Some(STATELESS_REVISION)
                || meta.protocol_version != Some(STATELESS_REVISION)
                || header("mcp-method") != Some("tools/call")
                || header("mcp-name") != Some(name)
            {
                return None;
            }
            let raw = meta.client_capabilities?;
            let capabilities: Value = serde_json::from_str(raw.get()).ok()?;
            let service = directory
                .stateless
                .get_or_init(|| (directory.factory)())
                .clone();
            let modern = (raw.to_owned(), meta.log_level.map(str::to_string));
            (service, Arc::new(capabilities), Some(modern))
        }
    };
    let owned = OwnedCall {
        service,
        name: name.to_string(),
        arguments: call.params.arguments.map(ToOwned::to_owned),
        principal: request.extensions().get::<Principal>().cloned(),
        capabilities,
        modern,
    };
    let Some(token) = token else {
        let answer = owned.run(None).await;
        return json_answer(id, answer);
    };
    let (progress, mut reports) = unbounded_channel();
    let mut running: Running = Box::pin(owned.run(Some(progress)));
    // Most calls report no progress: their answer is plain JSON, as without a token. Progress
    // the server sent before its answer is in `reports` before the answer arrives.
    let first = tokio::select! {
        biased;
        first = reports.recv() => match first {
            Some(first) => first,
            // The route went with the answer: no progress came.
            None => return json_answer(id, running.await),
        },
        answer = &mut running => return json_answer(id, answer),
    };
    let stream = ProgressStream {
        running: Some(std::sync::Mutex::new(running)),
        reports,
        first: Some(first),
        id: id.to_string(),
        token: token.get().to_string(),
    };
    let mut response = Response::new(stream.boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    Some(response)
}

/// The JSON-RPC answer to request `id`: `answer`'s result or error.
fn answer_message(id: &str, answer: DirectAnswer) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    match answer {
        DirectAnswer::FullPath => return None,
        DirectAnswer::Result(result) => {
            out.reserve(result.get().len() + 12);
            out.extend_from_slice(b",\"result\":");
            out.extend_from_slice(result.get().as_bytes());
        }
        DirectAnswer::Error(error) => {
            out.extend_from_slice(b",\"error\":");
            let error = serde_json::to_vec(&error.into_error_data()).unwrap_or_else(|_| {
                br#"{"code":-32603,"message":"the error could not be written"}"#.to_vec()
            });
            out.extend_from_slice(&error);
        }
    }
    out.push(b'}');
    Some(out)
}

/// `answer` as a JSON body; `None` when the full path must answer.
fn json_answer(id: &str, answer: DirectAnswer) -> Option<Response<Body>> {
    let out = answer_message(id, answer)?;
    let mut response = Response::new(http_body_util::Full::new(Bytes::from(out)).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Some(response)
}

/// A call on the hot path, running.
type Running = Pin<Box<dyn Future<Output = DirectAnswer> + Send>>;

/// An SSE answer: the call's progress as it comes (under the client's token), then its result.
/// Dropping it (the client went away) drops the call, which tells the server.
struct ProgressStream {
    /// In a mutex only so that the body is `Sync`, as answer bodies are; never contended.
    running: Option<std::sync::Mutex<Running>>,
    reports: UnboundedReceiver<Progress>,
    first: Option<Progress>,
    id: String,
    token: String,
}

impl ProgressStream {
    /// `message` as one SSE event, appended to `out`.
    fn event(out: &mut Vec<u8>, message: &[u8]) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(message);
        out.extend_from_slice(b"\n\n");
    }

    fn progress_event(&self, out: &mut Vec<u8>, progress: &Progress) {
        let mut params = serde_json::Map::new();
        params.insert("progress".into(), Value::from(progress.progress));
        if let Some(total) = progress.total {
            params.insert("total".into(), Value::from(total));
        }
        if let Some(message) = &progress.message {
            params.insert("message".into(), Value::String(message.clone()));
        }
        let params = Value::Object(params).to_string();
        let message = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":{},{}",
            self.token,
            params.strip_prefix('{').unwrap_or(&params)
        );
        Self::event(out, message.as_bytes());
    }

    fn progress_frame(&self, progress: &Progress) -> Frame<Bytes> {
        let mut out = Vec::new();
        self.progress_event(&mut out, progress);
        Frame::data(Bytes::from(out))
    }
}

impl http_body::Body for ProgressStream {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(self.progress_frame(&first))));
        }
        let Some(running) = self.running.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = match running.get_mut() {
            Ok(running) => running.as_mut().poll(cx),
            Err(_) => Poll::Ready(DirectAnswer::FullPath),
        };
        let answer = match polled {
            Poll::Ready(answer) => answer,
            Poll::Pending => {
                return match self.reports.poll_recv(cx) {
                    Poll::Ready(Some(progress)) => {
                        Poll::Ready(Some(Ok(self.progress_frame(&progress))))
                    }
                    _ => Poll::Pending,
                };
            }
        };
        self.running = None;
        // Progress sent before the answer goes first.
        let mut frames = Vec::new();
        while let Ok(progress) = self.reports.try_recv() {
            self.progress_event(&mut frames, &progress);
        }
        // Streaming already began, so the full path cannot take over: a legacy client's
        // server asked for input, which only the full path answers.
        let message = answer_message(&self.id, answer).unwrap_or_else(|| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":-32603,\"message\":\"the server asked for input during a call that was already streaming progress; call again\"}}}}",
                self.id
            )
            .into_bytes()
        });
        Self::event(&mut frames, &message);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(frames)))))
    }
}
