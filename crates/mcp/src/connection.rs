//! One live connection to one MCP server, over stdio or Streamable HTTP, in whichever
//! protocol era the server speaks. This is the only module that touches rmcp's client API;
//! everything it returns is a `tether-protocol` type or an [`McpError`].
//!
//! The era is picked automatically: we probe `server/discover` (2026-07-28) and fall back to
//! the `initialize` handshake (2025-11-25) when the server is legacy. Every request is bounded
//! by the server's configured timeout.
//!
//! Logging and resource subscriptions are deprecated in 2026-07-28 but live on legacy
//! servers, so this module uses rmcp's deprecated items on purpose.
#![allow(deprecated)]

use std::collections::HashMap;
use std::future::Future;

use futures::future::join_all;
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, ProtocolVersion, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tether_protocol::{
    Prompt, PromptResult, ProtocolEra, Resource, ResourceContents, ResourceTemplate, ServerSummary,
    Tool, ToolResult,
};

use tokio::sync::mpsc::UnboundedSender;

use crate::client::{
    ClientSession, HostHandler, NotificationTap, Progress, ProgressRoute, ProgressRoutes,
    StaleLists, Tapped, token_key,
};
use crate::config::{ServerConfig, Transport};
use crate::error::{McpError, near_matches};
use crate::input_rounds::{self, Forwarding, InputRequired, Reply};
use crate::person_wait::{PauseClock, PausingHost};
use crate::stdio::StdioProcess;
use crate::streamable_client::{StandaloneStream, WatchedClient};

mod calls;
mod handshake;
mod lists;
mod paging;

use paging::all_pages;

use handshake::{open_session, saved_sign_in};

/// What a direct call ([`ServerConnection::call_direct`]) came back with.
#[derive(Debug)]
pub enum DirectReply {
    /// The server's result, exactly as it wrote it.
    Result(Box<serde_json::value::RawValue>),
    /// An answer only the full path handles (questions for the client): call again that way.
    FullPath,
}

/// The `_meta` of a modern request from this session's client as rmcp sends it, in two parts:
/// the object's text up to (not including) its client capabilities and closing brace, and our
/// own capabilities' text, so that a call made for another client can carry that client's.
fn modern_meta(session: &Session) -> (String, String) {
    use rmcp::handler::client::ClientHandler;
    let info = session.client.service().get_info();
    let version = session
        .client
        .peer()
        .peer_info()
        .map(|server| server.protocol_version.clone())
        .unwrap_or(info.protocol_version);
    let mut meta = Map::new();
    meta.insert(
        "io.modelcontextprotocol/protocolVersion".into(),
        Value::String(version.to_string()),
    );
    meta.insert(
        "io.modelcontextprotocol/clientInfo".into(),
        serde_json::to_value(&info.client_info).unwrap_or_default(),
    );
    let mut start = Value::Object(meta).to_string();
    start.pop();
    let capabilities = serde_json::to_string(&info.capabilities).unwrap_or_else(|_| "{}".into());
    (start, capabilities)
}

/// JSON-RPC error code of "URL elicitation required" (MCP 2025-11-25).
const URL_ELICITATION_REQUIRED: i32 = -32042;
/// The first protocol version of the modern (stateless) era.
const FIRST_MODERN_VERSION: &str = "2026-07-28";

/// A connected server. A stdio server that exits, or an HTTP server whose connection drops,
/// is started again on the next request (see [`ServerConnection::reconnect`]); everything that
/// outlives one session (progress routes, change flags, the summary) lives here, and what a
/// restart replaces lives in [`Session`].
pub struct ServerConnection {
    config: ServerConfig,
    host: Arc<dyn HostHandler>,
    session: std::sync::RwLock<Arc<Session>>,
    /// Held while a restart runs, so concurrent callers wait for one restart instead of
    /// starting several; holds the times of recent restarts for the backoff.
    restarting: tokio::sync::Mutex<RestartLog>,
    restarts: AtomicU32,
    summary: ServerSummary,
    progress: ProgressRoutes,
    stale: Arc<StaleLists>,
    cancellations: Cancellations,
    /// The level modern servers are asked to log at, per request.
    log_level: Option<rmcp::model::LoggingLevel>,
    /// Background readers of modern `subscriptions/listen` streams; aborted on close.
    listeners: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    startup: Duration,
    /// Tools the server runs only as tasks (`execution.taskSupport: required`), as last listed.
    task_tools: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Paused while the host answers this server's questions, which a call's deadline skips.
    pauses: Arc<PauseClock>,
}

/// One session with the server: what a restart replaces. Dropping it ends the session and
/// kills a stdio server's process group.
struct Session {
    client: RunningService<RoleClient, ClientSession>,
    process: Option<StdioProcess>,
    /// The `_meta` a modern server needs on each direct call (protocol version, client info
    /// and capabilities), as JSON text; made on the first one.
    direct_meta: std::sync::OnceLock<(String, String)>,
}

impl Session {
    /// Whether the server went away: its process exited or the transport closed.
    fn is_gone(&self) -> bool {
        self.client.peer().is_transport_closed()
            || self.process.as_ref().is_some_and(StdioProcess::has_exited)
    }

    /// Why it went away, for the user.
    async fn why_gone(&self) -> String {
        match &self.process {
            Some(process) => process.death_note().await,
            None => "the connection closed".into(),
        }
    }
}

/// Restarts within [`RESTART_WINDOW`]; more than [`MAX_RESTARTS`] there and the server is left
/// down until the window has room again (or the user reconnects it).
#[derive(Default)]
struct RestartLog {
    recent: std::collections::VecDeque<Instant>,
}

/// At most this many restarts per [`RESTART_WINDOW`]: a server that crashes on every call is
/// not restarted forever.
const MAX_RESTARTS: usize = 5;
const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// The wait before the `n`th restart within the window (`n` from 0): none for the first, then
/// 250 ms doubling, so a server that dies at start-up is not respawned in a tight loop.
fn restart_delay(n: usize) -> Duration {
    match n {
        0 => Duration::ZERO,
        n => Duration::from_millis(250) * (1u32 << (n - 1).min(5)),
    }
}

impl std::fmt::Debug for ServerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConnection")
            .field("name", &self.config.name)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

/// How to open the session: probe for the modern era unless the config pins a revision.
fn lifecycle(config: &ServerConfig) -> (ClientLifecycleMode, ProtocolVersion) {
    let pinned = config
        .protocol_version
        .as_deref()
        .and_then(|v| serde_json::from_value::<ProtocolVersion>(Value::from(v)).ok());
    match pinned {
        Some(version) if version < ProtocolVersion::V_2026_07_28 => {
            (ClientLifecycleMode::Initialize, version)
        }
        Some(version) => (
            ClientLifecycleMode::Discover {
                preferred_versions: vec![version],
            },
            ProtocolVersion::LATEST_WITH_INITIALIZE,
        ),
        None => (
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            ProtocolVersion::LATEST_WITH_INITIALIZE,
        ),
    }
}

impl ServerConnection {
    /// Starts (stdio) or reaches (HTTP) the server and completes the handshake within its
    /// startup timeout. Requests and notifications from the server go to `host`. HTTP
    /// servers get the OAuth tokens saved by `tether auth login`, if any.
    pub async fn connect(
        config: &ServerConfig,
        host: Arc<dyn HostHandler>,
    ) -> Result<ServerConnection, McpError> {
        crate::http_client::install_tls_provider();
        if !matches!(config.transport, Transport::Http { .. }) {
            return ServerConnection::connect_authorized(config, host, None).await;
        }
        // One deadline for the whole start: restoring a saved sign-in may mean OAuth
        // discovery and a token refresh over the network before the handshake begins.
        let start = async {
            let saved = saved_sign_in(config).await;
            ServerConnection::connect_authorized(config, host, saved).await
        };
        match tokio::time::timeout(config.startup_timeout, start).await {
            Ok(outcome) => outcome,
            Err(_) => Err(McpError::Timeout {
                server: config.name.clone(),
                operation: "startup".into(),
                after: config.startup_timeout,
                hint: Some(
                    "its sign-in and handshake did not finish in time; raise \"startupTimeout\" if it is just slow"
                        .into(),
                ),
            }),
        }
    }

    /// [`connect`](Self::connect) with an explicit OAuth authorization for HTTP servers
    /// (`None`: no token).
    pub async fn connect_authorized(
        config: &ServerConfig,
        host: Arc<dyn HostHandler>,
        authorization: Option<crate::auth::Authorization>,
    ) -> Result<ServerConnection, McpError> {
        let started = Instant::now();
        let progress = ProgressRoutes::default();
        let stale = Arc::new(StaleLists::default());
        let pauses = Arc::new(PauseClock::default());
        let host: Arc<dyn HostHandler> = Arc::new(PausingHost {
            inner: host,
            clock: pauses.clone(),
        });
        let log_level: Option<rmcp::model::LoggingLevel> = host
            .log_level()
            .and_then(|level| serde_json::from_value(Value::from(level)).ok());
        let (session, summary) =
            open_session(config, &host, authorization, &progress, &stale, log_level).await?;
        let connection = ServerConnection {
            config: config.clone(),
            host,
            session: std::sync::RwLock::new(Arc::new(session)),
            restarting: Default::default(),
            restarts: AtomicU32::new(0),
            summary,
            progress,
            stale,
            cancellations: Cancellations::default(),
            listeners: Default::default(),
            log_level,
            startup: started.elapsed(),
            task_tools: Default::default(),
            pauses,
        };
        connection.watch_lists(&connection.live().await?);
        Ok(connection)
    }

    /// Keeps a `subscriptions/listen` stream open to a 2026-07-28 server for the list changes
    /// it announces: a modern server sends `list_changed` only on such a stream (the tap
    /// handles each notification as it arrives, as on a legacy connection). A legacy server
    /// sends them unasked.
    fn watch_lists(&self, session: &Arc<Session>) {
        if self.summary.era != ProtocolEra::Modern {
            return;
        }
        let mut filter = rmcp::model::SubscriptionFilter::builder();
        let mut any = false;
        for (list, wanted) in [("tools", 0), ("prompts", 1), ("resources", 2)] {
            if self.summary.has_capability(&format!("{list}.listChanged")) {
                any = true;
                filter = match wanted {
                    0 => filter.tools_list_changed(),
                    1 => filter.prompts_list_changed(),
                    _ => filter.resources_list_changed(),
                };
            }
        }
        if !any {
            return;
        }
        let filter = filter.build();
        // The peer, not the session: `close` must be able to take the session back whole.
        let peer = session.client.peer().clone();
        let watch = tokio::spawn(async move {
            let Ok(mut stream) = peer.listen(filter).await else {
                return;
            };
            while let Ok(Some(_)) = stream.next().await {}
        });
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(watch);
        }
    }
}

impl ServerConnection {
    /// The server's config name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its config.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// What the server told us about itself.
    pub fn summary(&self) -> &ServerSummary {
        &self.summary
    }

    /// Time from spawn (or first request) to a finished handshake.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Whether the server said its tools changed since they were last listed.
    pub fn tools_changed(&self) -> bool {
        self.stale.tools.load(Ordering::SeqCst)
    }

    /// A receiver that wakes on each of the server's `tools/list_changed` notifications (its
    /// value counts them), for holders of a tool snapshot that want the change pushed to them.
    pub fn tool_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stale.tool_changes.subscribe()
    }

    /// Ends the session: closes the transport, then lets a child exit or kills it.
    pub async fn close(self) {
        let ServerConnection {
            session,
            cancellations,
            listeners,
            ..
        } = self;
        let session = session
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Ok(listeners) = listeners.lock() {
            listeners.iter().for_each(tokio::task::JoinHandle::abort);
        }
        // Cancellations of abandoned calls are delivered before the connection goes, so the
        // server stops their work.
        let pending: Vec<_> = cancellations
            .lock()
            .map(|mut tasks| tasks.drain(..).collect())
            .unwrap_or_default();
        let _ = tokio::time::timeout(Duration::from_secs(2), join_all(pending)).await;
        // Nothing else holds the session once the connection is given up by value, except a
        // call future someone leaked; then dropping our handle is all we can do.
        let Ok(Session {
            client, process, ..
        }) = Arc::try_unwrap(session)
        else {
            return;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
        if let Some(process) = process {
            process.stop().await;
        }
    }

    /// How many times the server was started again after it went away.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Whether the server is down now (its process exited or its connection closed); the next
    /// request starts it again.
    pub fn is_down(&self) -> bool {
        self.current().is_gone()
    }

    /// Ends the current session, whatever its state, and opens a new one now, outside the
    /// restart limit (which starts afresh): the user's way back to a server left down.
    pub async fn reconnect(&self) -> Result<(), McpError> {
        let current = self.current();
        self.restart(current, true).await.map(drop)
    }

    /// The session requests go to now.
    fn current(&self) -> Arc<Session> {
        match self.session.read() {
            Ok(session) => session.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The session to send a request on: the current one, or a new one when the server went
    /// away since the last request.
    async fn live(&self) -> Result<Arc<Session>, McpError> {
        let current = self.current();
        if !current.is_gone() {
            return Ok(current);
        }
        self.restart(current, false).await
    }

    /// Replaces `old` with a new session, unless another caller already did. Unforced restarts
    /// wait out the backoff and stop at [`MAX_RESTARTS`] per [`RESTART_WINDOW`].
    async fn restart(&self, old: Arc<Session>, forced: bool) -> Result<Arc<Session>, McpError> {
        let mut log = self.restarting.lock().await;
        let current = self.current();
        if !Arc::ptr_eq(&current, &old) {
            return Ok(current);
        }
        let server = self.config.name.clone();
        let why = if old.is_gone() {
            old.why_gone().await
        } else {
            "reconnect asked for".into()
        };
        let now = Instant::now();
        if forced {
            log.recent.clear();
        } else {
            log.recent
                .retain(|at| now.duration_since(*at) < RESTART_WINDOW);
            if log.recent.len() >= MAX_RESTARTS {
                let until = log
                    .recent
                    .front()
                    .map(|first| RESTART_WINDOW.saturating_sub(now.duration_since(*first)))
                    .unwrap_or_default();
                return Err(McpError::Unreachable {
                    server,
                    detail: format!(
                        "{why}; it was restarted {MAX_RESTARTS} times within a minute, so it stays down for {} (`/reconnect` in a chat starts it now)",
                        crate::error::fmt_duration(until)
                    ),
                });
            }
            if let Some(last) = log.recent.back() {
                let at = *last + restart_delay(log.recent.len());
                tokio::time::sleep_until(at.into()).await;
            }
        }
        log.recent.push_back(Instant::now());
        // Saved sign-in is read again: it may have been refreshed since the first connect.
        let authorization = saved_sign_in(&self.config).await;
        drop(old);
        let (session, _) = open_session(
            &self.config,
            &self.host,
            authorization,
            &self.progress,
            &self.stale,
            self.log_level,
        )
        .await
        .map_err(|error| McpError::Unreachable {
            server: server.clone(),
            detail: format!("{why}; starting it again failed: {error}"),
        })?;
        let session = Arc::new(session);
        match self.session.write() {
            Ok(mut slot) => *slot = session.clone(),
            Err(poisoned) => *poisoned.into_inner() = session.clone(),
        }
        self.watch_lists(&session);
        let restarts = self.restarts.fetch_add(1, Ordering::Relaxed) + 1;
        self.host.notify(
            &server,
            crate::client::ServerNotice::Restarted {
                restarts,
                reason: why,
            },
        );
        // A new process may offer other tools; holders of a snapshot list them again.
        self.stale.tools.store(true, Ordering::SeqCst);
        self.stale.tool_changes.send_modify(|n| *n += 1);
        Ok(session)
    }

    /// Runs one request under the server's timeout and turns failures into [`McpError`].
    async fn request<T>(
        &self,
        session: &Session,
        operation: &str,
        future: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, McpError> {
        let outcome = tokio::time::timeout(self.config.timeout, future)
            .await
            .unwrap_or(Err(ServiceError::Timeout {
                timeout: self.config.timeout,
            }));
        self.outcome(session, operation, outcome).await
    }

    /// Turns a request's outcome into [`McpError`], naming the server and the operation.
    async fn outcome<T>(
        &self,
        session: &Session,
        operation: &str,
        outcome: Result<T, ServiceError>,
    ) -> Result<T, McpError> {
        let server = self.config.name.clone();
        match outcome {
            Ok(value) => Ok(value),
            Err(ServiceError::McpError(error))
                if error.code.0 == URL_ELICITATION_REQUIRED
                    && !crate::error::elicitation_urls(error.data.as_ref()).is_empty() =>
            {
                Err(McpError::UrlRequired {
                    server,
                    operation: operation.to_string(),
                    urls: crate::error::elicitation_urls(error.data.as_ref()),
                })
            }
            Err(ServiceError::McpError(error)) => Err(McpError::Rpc {
                server,
                operation: operation.to_string(),
                code: error.code.0,
                message: error.message.to_string(),
                data: error.data.map(Box::new),
            }),
            Err(ServiceError::Timeout { .. }) => Err(McpError::Timeout {
                server,
                operation: operation.to_string(),
                after: self.config.timeout,
                hint: session.process.as_ref().and_then(StdioProcess::hint),
            }),
            Err(error) if auth_challenge(&error).is_some() => Err(McpError::SignInRequired {
                server,
                challenge: auth_challenge(&error),
            }),
            Err(error) => {
                let detail = match &session.process {
                    Some(process)
                        if matches!(
                            error,
                            ServiceError::TransportClosed | ServiceError::TransportSend(_)
                        ) =>
                    {
                        format!("{operation} failed: {}", process.death_note().await)
                    }
                    _ => format!("{operation} failed: {}", error_chain(&error)),
                };
                Err(McpError::Unreachable { server, detail })
            }
        }
    }

    /// Converts between rmcp's and our types through their shared wire shape.
    fn convert<T: Serialize, U: DeserializeOwned>(
        &self,
        operation: &str,
        value: T,
    ) -> Result<U, McpError> {
        serde_json::to_value(value)
            .and_then(serde_json::from_value)
            .map_err(|e| self.schema_mismatch(operation, e))
    }

    fn schema_mismatch(&self, operation: &str, error: impl std::fmt::Display) -> McpError {
        McpError::Unreachable {
            server: self.config.name.clone(),
            detail: format!(
                "{operation}: the server's answer does not match the MCP schema: {error}"
            ),
        }
    }
}

/// What an argument completion is for.
#[derive(Debug, Clone, Copy)]
pub enum Completion<'a> {
    /// An argument of the named prompt.
    Prompt(&'a str),
    /// A variable of the resource template with this URI template.
    Template(&'a str),
}

/// A call in flight: unregisters its progress route when done and, if abandoned before the
/// answer came, tells the server with `notifications/cancelled`.
struct InFlight {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    token: String,
    routes: ProgressRoutes,
    cancellations: Cancellations,
    /// What `notifications/cancelled` tells the server.
    reason: String,
}

/// `notifications/cancelled` still being sent; `close` waits for them.
type Cancellations = Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>;

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.remove(&self.token);
        }
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let notification = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(id), Some(std::mem::take(&mut self.reason))),
        ));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let task = runtime.spawn(async move {
                let _ = peer.send_notification(notification).await;
            });
            if let Ok(mut tasks) = self.cancellations.lock() {
                tasks.retain(|t| !t.is_finished());
                tasks.push(task);
            }
        }
    }
}

/// Puts `tap` on the incoming side of any transport rmcp accepts.
fn tapped<T, E, A>(
    transport: T,
    tap: &NotificationTap,
) -> Tapped<impl rmcp::transport::Transport<RoleClient, Error = E> + 'static>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    Tapped {
        inner: transport.into_transport(),
        tap: tap.clone(),
    }
}

/// The `WWW-Authenticate` challenge of a 401 or 403 somewhere in `error`'s causes.
fn auth_challenge(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(e) = error.downcast_ref::<AuthRequiredError>() {
            return Some(e.www_authenticate_header.clone());
        }
        if let Some(e) = error.downcast_ref::<InsufficientScopeError>() {
            return Some(e.www_authenticate_header.clone());
        }
        current = error.source();
    }
    None
}

/// An error with its sources, on one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = without_type_names(&error.to_string());
    let mut source = error.source();
    while let Some(inner) = source {
        let part = without_type_names(&inner.to_string());
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

/// rmcp's transport errors name Rust types (`Transport [tether_mcp::client::Tapped<…>] error:
/// …`); what follows the brackets says the same in words.
fn without_type_names(text: &str) -> String {
    match (text.find("Transport ["), text.rfind("] error: ")) {
        (Some(start), Some(end)) if start < end => {
            let before = text[..start].trim_end();
            let before = before
                .strip_suffix("Send message error")
                .unwrap_or(before)
                .trim_end();
            let after = &text[end + "] error: ".len()..];
            if before.is_empty() {
                after.to_string()
            } else {
                format!("{before}: {after}")
            }
        }
        _ => text.to_string(),
    }
}

/// An optional list the server does not implement ("Method not found", -32601) is empty, not
/// a failure: servers that declare `resources` often serve no templates.
fn optional_list<T>(result: Result<T, McpError>) -> Result<Option<T>, McpError> {
    match result {
        Ok(list) => Ok(Some(list)),
        Err(McpError::Rpc { code: -32601, .. }) => Ok(None),
        Err(error) => Err(error),
    }
}
