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

/// One Streamable HTTP handshake over `client` (plain, or signing requests in), its SSE data
/// read through the task-field rewrite as every reader does, its GET stream reported to
/// `standalone`.
async fn serve_streamable<C>(
    client: C,
    standalone: StandaloneStream,
    config: StreamableHttpClientTransportConfig,
    tap: &NotificationTap,
    session: ClientSession,
    lifecycle: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, ClientSession>, rmcp::service::ClientInitializeError>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient + Send + Sync + 'static,
{
    let client = WatchedClient::new(client, standalone);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    session
        .serve_with_lifecycle(tapped(transport, tap), lifecycle)
        .await
}

/// The longest a new Streamable HTTP connection waits for its GET stream to be answered.
const STANDALONE_STREAM_WAIT: Duration = Duration::from_secs(2);

/// How long an idle connection to a server stays open for the next request.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// The HTTP client of a Streamable HTTP connection: only same-origin 307/308 redirects, at
/// most 10 (as rmcp's default client), and, unlike rmcp's default, connections kept alive
/// between requests. rmcp turns pooling off because a connection whose SSE answer was left
/// unread stalled ~40 ms on delayed ACKs when reused; rmcp now reads each answer's stream to
/// its end, and a new TCP connection per request cost 300 µs of a 500 µs proxied call on
/// loopback (docs/decisions.md, "Keep-alive in Tether's HTTP client"). Idle connections close
/// after 4 s, before the 5 s keep-alive timeout of Node's and uvicorn's servers, so a request
/// never races a server closing the connection it was written to.
fn http_client() -> reqwest::Client {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|original| original.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else {
            attempt.follow()
        }
    });
    crate::http_client::builder()
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .redirect(policy)
        .build()
        .unwrap_or_default()
}

/// The legacy handshake: `initialize` at 2025-11-25, the newest revision that has it.
fn legacy_lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Initialize
}

/// Why a failed start deserves a second handshake, `initialize` at 2025-11-25 on a fresh
/// connection: only after our own `server/discover` probe (a pinned revision is tried alone),
/// and on any answer to it that was not a modern success. rmcp falls back by itself only on a
/// correlated JSON-RPC error that names no versions; a server that lists only legacy versions
/// (`-32602` with `supported`), answers the POST with HTTP 400/404/405 or a body that is not
/// JSON-RPC, or closes the connection, is as likely to be a legacy server (as the spec's
/// backwards-compatibility section says, and rust-sdk's own fallback fix). `None`: do not retry
/// (rmcp already tried `initialize`, or the start was cancelled).
fn legacy_retry(
    lifecycle: &ClientLifecycleMode,
    error: &rmcp::service::ClientInitializeError,
) -> Option<String> {
    use rmcp::service::ClientInitializeError as Failed;
    if !matches!(lifecycle, ClientLifecycleMode::Auto { .. }) {
        return None;
    }
    match error {
        Failed::LegacyFallbackFailed { .. }
        | Failed::Cancelled
        | Failed::NoPreferredProtocolVersion => None,
        Failed::NoCompatibleProtocolVersion {
            server_supported, ..
        } => Some(format!(
            "server/discover: the server supports {}",
            if server_supported.is_empty() {
                "no version it named".to_string()
            } else {
                server_supported
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )),
        other => Some(format!("server/discover failed: {other}")),
    }
}

/// The server's own reason when it answered the handshake with an error (after the modern
/// probe, the legacy `initialize`'s answer is the one that counts).
fn handshake_refusal(error: &rmcp::service::ClientInitializeError) -> Option<String> {
    use rmcp::service::ClientInitializeError as Failed;
    match error {
        Failed::JsonRpcError(data) => Some(format!(
            "it refused the handshake: {} (code {})",
            data.message, data.code.0
        )),
        Failed::LegacyFallbackFailed { fallback, .. } => handshake_refusal(fallback),
        _ => None,
    }
}

/// The OAuth tokens `tether auth login` saved for an HTTP server, if any.
async fn saved_sign_in(config: &ServerConfig) -> Option<crate::auth::Authorization> {
    match (&config.transport, crate::auth::credentials_path()) {
        (Transport::Http { url, .. }, Some(path)) => {
            crate::auth::saved_authorization(&config.name, url, &path, config.oauth.guard()).await
        }
        _ => None,
    }
}

/// Starts (stdio) or reaches (HTTP) the server and completes the handshake within its startup
/// timeout: one [`Session`], with what the server said about itself.
async fn open_session(
    config: &ServerConfig,
    host: &Arc<dyn HostHandler>,
    authorization: Option<crate::auth::Authorization>,
    progress: &ProgressRoutes,
    stale: &Arc<StaleLists>,
    log_level: Option<rmcp::model::LoggingLevel>,
) -> Result<(Session, ServerSummary), McpError> {
    let started = Instant::now();
    let name = config.name.as_str();
    let (lifecycle, protocol_version) = lifecycle(config);
    let tap = NotificationTap {
        server: name.to_string(),
        host: host.clone(),
        progress: progress.clone(),
        stale: stale.clone(),
    };
    let session = ClientSession {
        protocol_version,
        server: name.to_string(),
        host: host.clone(),
    };
    let (client, process) = match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let (mut process, pipes) = StdioProcess::spawn(name, command, args, env, cwd.as_ref())?;
            let mut outcome = tokio::time::timeout(
                config.startup_timeout,
                session
                    .clone()
                    .serve_with_lifecycle(tapped(pipes, &tap), lifecycle.clone()),
            )
            .await;
            if let Ok(Err(error)) = &outcome
                && let Some(why) = legacy_retry(&lifecycle, error)
            {
                // The probe may have left the server in any state (some exit on a method
                // they do not know): the legacy handshake gets a fresh process.
                tracing::info!(server = name, "{why}; trying initialize at 2025-11-25");
                process.stop().await;
                let (fresh, pipes) = StdioProcess::spawn(name, command, args, env, cwd.as_ref())?;
                process = fresh;
                outcome = tokio::time::timeout(
                    config.startup_timeout.saturating_sub(started.elapsed()),
                    session.serve_with_lifecycle(tapped(pipes, &tap), legacy_lifecycle()),
                )
                .await;
            }
            match outcome {
                Ok(Ok(client)) => (client, Some(process)),
                Ok(Err(error)) => {
                    tracing::debug!(server = name, "handshake failed: {error:?}");
                    // A server that refused the handshake said why; only otherwise is its exit
                    // worth waiting for.
                    let why = match handshake_refusal(&error) {
                        Some(refused) => refused,
                        None => process.death_note().await,
                    };
                    process.stop().await;
                    return Err(McpError::Unreachable {
                        server: name.to_string(),
                        detail: format!("failed during startup: {why}"),
                    });
                }
                Err(_) => {
                    let hint = process.hint();
                    process.stop().await;
                    return Err(McpError::Timeout {
                            server: name.to_string(),
                            operation: "startup".into(),
                            after: config.startup_timeout,
                            hint: Some(hint.unwrap_or_else(|| {
                                "it never answered the handshake; raise \"startupTimeout\" if it is just slow".into()
                            })),
                        });
                }
            }
        }
        Transport::Http { url, headers } => {
            crate::http_client::install_tls_provider();
            let mut header_map = HashMap::new();
            for (key, value) in headers {
                let bad = |what: &str| McpError::Config {
                    place: format!("mcpServers.{name}.headers"),
                    message: format!("{what} \"{key}\" is not a valid HTTP header"),
                };
                let key_parsed =
                    http::HeaderName::from_bytes(key.as_bytes()).map_err(|_| bad("name"))?;
                let value_parsed =
                    http::HeaderValue::from_str(value).map_err(|_| bad("value of"))?;
                header_map.insert(key_parsed, value_parsed);
            }
            let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(header_map);
            let fallback_session = session.clone();
            // One signed-in client for both handshakes: a retry must not sign in again.
            let auth_client = authorization.map(|crate::auth::Authorization(manager)| {
                AuthClient::new(reqwest::Client::default(), manager)
            });
            let standalone = StandaloneStream::default();
            let serve = |session: ClientSession, lifecycle: ClientLifecycleMode| {
                let config = transport_config.clone();
                let auth_client = auth_client.clone();
                let tap = tap.clone();
                let standalone = standalone.clone();
                async move {
                    match auth_client {
                        Some(client) => {
                            serve_streamable(client, standalone, config, &tap, session, lifecycle)
                                .await
                        }
                        None => {
                            let client = http_client();
                            serve_streamable(client, standalone, config, &tap, session, lifecycle)
                                .await
                        }
                    }
                }
            };
            let mut outcome = tokio::time::timeout(
                config.startup_timeout,
                serve(session.clone(), lifecycle.clone()),
            )
            .await;
            if let Ok(Err(error)) = &outcome
                && !error.is_authorization_required()
                && error.auth_challenge().is_none()
                && let Some(why) = legacy_retry(&lifecycle, error)
            {
                tracing::info!(server = name, "{why}; trying initialize at 2025-11-25");
                outcome = tokio::time::timeout(
                    config.startup_timeout.saturating_sub(started.elapsed()),
                    serve(session, legacy_lifecycle()),
                )
                .await;
            }
            match outcome {
                Ok(Ok(client)) => {
                    // A server's own requests may come on the GET stream; one sent before it
                    // is open is lost (streamable_client.rs), so the connection is handed out
                    // once the stream is answered. A server that holds the GET's headers back
                    // costs this wait once, never a failure.
                    let within = STANDALONE_STREAM_WAIT
                        .min(config.startup_timeout.saturating_sub(started.elapsed()));
                    if !standalone.settled(within).await {
                        tracing::debug!(
                            server = name,
                            "its GET stream was not answered within {within:?}; going on"
                        );
                    }
                    (client, None)
                }
                Ok(Err(error))
                    if error.is_authorization_required() || error.auth_challenge().is_some() =>
                {
                    return Err(McpError::SignInRequired {
                        server: name.to_string(),
                        challenge: error.auth_challenge().map(str::to_string),
                    });
                }
                Ok(Err(error)) => {
                    // The spec's backwards compatibility: a server that refuses our POST
                    // may be an HTTP+SSE one; try that before giving up.
                    let started_fallback = Instant::now();
                    let remaining = config.startup_timeout.saturating_sub(started.elapsed());
                    let fallback = tokio::time::timeout(
                        remaining,
                        serve_sse(fallback_session, &tap, url, headers, remaining),
                    )
                    .await;
                    match fallback {
                        Ok(Ok(client)) => {
                            tracing::info!(
                                server = name,
                                "fell back to HTTP+SSE after {:?}",
                                started_fallback.elapsed()
                            );
                            (client, None)
                        }
                        _ => {
                            let why = match unreachable_reason(url).await {
                                Some(reason) => reason,
                                None => error_chain(&error),
                            };
                            return Err(McpError::Unreachable {
                                server: name.to_string(),
                                detail: format!("cannot connect to {url}: {why}"),
                            });
                        }
                    }
                }
                Err(_) => {
                    return Err(McpError::Timeout {
                        server: name.to_string(),
                        operation: format!("connecting to {url}"),
                        after: config.startup_timeout,
                        hint: None,
                    });
                }
            }
        }
        Transport::Sse { url, headers } => {
            let outcome = tokio::time::timeout(
                config.startup_timeout,
                serve_sse(session, &tap, url, headers, config.startup_timeout),
            )
            .await;
            match outcome {
                Ok(Ok(client)) => (client, None),
                Ok(Err(detail)) => {
                    return Err(McpError::Unreachable {
                        server: name.to_string(),
                        detail: format!("cannot connect to {url} (HTTP+SSE): {detail}"),
                    });
                }
                Err(_) => {
                    return Err(McpError::Timeout {
                        server: name.to_string(),
                        operation: format!("connecting to {url} (HTTP+SSE)"),
                        after: config.startup_timeout,
                        hint: None,
                    });
                }
            }
        }
    };
    let summary = summarize(&client);
    if let Some(level) = log_level
        && summary.era == ProtocolEra::Legacy
        && summary.has_capability("logging")
    {
        // Best effort: a server that refuses still works, it just logs at its own level.
        {
            let set = client.set_level(rmcp::model::SetLevelRequestParams::new(level));
            if let Err(error) = tokio::time::timeout(config.timeout, set).await {
                tracing::debug!(server = name, "logging/setLevel: {error}");
            }
        }
    }
    let session = Session {
        client,
        process,
        direct_meta: std::sync::OnceLock::new(),
    };
    Ok((session, summary))
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

    /// Its tools (all pages), minus those the config filters out.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        if !self.summary.has_capability("tools") {
            return Ok(Vec::new());
        }
        // Cleared before listing so a change announced during the listing is not lost.
        self.stale.tools.store(false, Ordering::SeqCst);
        let session = self.live().await?;
        let tools = self
            .request(
                &session,
                "tools/list",
                all_pages(|page| session.client.list_tools(page)),
            )
            .await?;
        let mut tools = serde_json::to_value(tools).unwrap_or_default();
        // `execution` came through rmcp in `_meta` (see `stdio::keep_legacy_task_fields`).
        for tool in tools.as_array_mut().into_iter().flatten() {
            let Some(meta) = tool.get_mut("_meta").and_then(Value::as_object_mut) else {
                continue;
            };
            let execution = meta.remove(crate::legacy_fields::EXECUTION_META);
            // The key was ours; a `_meta` left empty by taking it was not the server's.
            let emptied = execution.is_some() && meta.is_empty();
            if emptied && let Some(object) = tool.as_object_mut() {
                object.remove("_meta");
            }
            if let Some(execution) = execution {
                tool["execution"] = execution;
            }
        }
        let tools: Vec<Tool> =
            serde_json::from_value(tools).map_err(|e| self.schema_mismatch("tools/list", e))?;
        if let Ok(mut task_tools) = self.task_tools.lock() {
            *task_tools = tools
                .iter()
                .filter(|t| t.requires_task())
                .map(|t| t.name.clone())
                .collect();
        }
        Ok(tools
            .into_iter()
            .filter(|t| self.config.offers_tool(&t.name))
            .collect())
    }

    /// Finds one tool by name, with near matches in the error.
    pub async fn find_tool(&self, name: &str) -> Result<Tool, McpError> {
        let tools = self.list_tools().await?;
        if let Some(tool) = tools.iter().find(|t| t.name == name) {
            return Ok(tool.clone());
        }
        if !self.config.offers_tool(name) {
            return Err(McpError::DisabledTool {
                server: self.config.name.clone(),
                name: name.to_string(),
            });
        }
        Err(McpError::UnknownItem {
            server: self.config.name.clone(),
            what: "tool",
            name: name.to_string(),
            suggestions: near_matches(name, tools.iter().map(|t| t.name.as_str())),
        })
    }

    /// Calls a tool. A tool that reports failure is `Ok` with `is_error` set; `Err` means the
    /// call itself failed (timeout, protocol error, server gone). The server's progress
    /// notifications for this call go to `progress`; its questions go to our host.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> Result<ToolResult, McpError> {
        match self.call_tool_for(tool, arguments, progress, None).await? {
            Reply::Complete(result) => Ok(result),
            // Without a client to relay them to, rmcp answers the questions through our host.
            Reply::InputRequired(_) => Err(self.unanswered(&format!("tool \"{tool}\""))),
        }
    }

    /// [`call_tool`](Self::call_tool) on another client's behalf (the gateway's calls): its
    /// capabilities and log level go upstream with the call and, for a client that takes
    /// input-required results, its answers go up and the server's questions come back.
    pub async fn call_tool_for(
        &self,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
        forwarding: Option<&Forwarding>,
    ) -> Result<Reply<ToolResult>, McpError> {
        if !self.config.offers_tool(tool) {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\": tool \"{tool}\" is filtered out by allowedTools/disabledTools in the config",
                self.config.name
            )));
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        if let Some(round) = forwarding.and_then(|f| f.input.as_ref()) {
            params.input_responses = round.rmcp_responses();
            params.request_state = round.state.clone();
        }
        let operation = format!("tool \"{tool}\"");
        // Not through `request`: the call keeps its own deadline, so that when it passes the
        // server is told why, instead of a second timer dropping the call first.
        let session = self.live().await?;
        let as_task = self
            .task_tools
            .lock()
            .is_ok_and(|tools| tools.contains(tool));
        let peer = session.client.peer();
        let timeout = self.config.timeout;
        let outcome = if as_task {
            crate::tasks::call_as_task(peer, tool, params.arguments, timeout, progress).await
        } else {
            let outcome = self
                .call_with_progress(&session, &params, progress.clone(), forwarding)
                .await;
            // Where the tool's `execution` did not reach us (a plain JSON answer over HTTP),
            // the server's refusal says it: run it as a task, from now on too.
            let refused = match &outcome {
                Err(ServiceError::McpError(error)) => crate::tasks::needs_task(error),
                Ok(result) => crate::tasks::refused_without_task(result),
                Err(_) => false,
            };
            if refused {
                self.mark_task_tool(tool);
                crate::tasks::call_as_task(peer, tool, params.arguments, timeout, progress).await
            } else {
                outcome
            }
        };
        let result = self.outcome(&session, &operation, outcome).await?;
        if input_rounds::is_input_required(&result) {
            return Ok(Reply::InputRequired(InputRequired { result }));
        }
        // Already JSON: read it as ours directly, rather than copying it through `convert`.
        serde_json::from_value(result)
            .map(Reply::Complete)
            .map_err(|e| self.schema_mismatch(&operation, e))
    }

    /// Whether a call of `tool` may take the direct lane ([`call_direct`](Self::call_direct)):
    /// a stdio server that offers the tool (config filters) and declares no tasks, so that no
    /// answer of it needs rmcp's task handling.
    pub fn takes_direct_calls(&self, tool: &str) -> bool {
        matches!(self.config.transport, Transport::Stdio { .. })
            && self.config.offers_tool(tool)
            && !self.summary.has_capability("tasks")
            && !self
                .task_tools
                .lock()
                .map_or(true, |tools| tools.contains(tool))
    }

    /// Calls `tool` past rmcp: the arguments go up as the client sent them (a JSON object's
    /// text), the server's result comes back as it wrote it, undecoded. For the gateway's hot
    /// path; only where [`takes_direct_calls`](Self::takes_direct_calls) said so. The server's
    /// JSON-RPC errors, timeouts and exits are the same [`McpError`]s as
    /// [`call_tool_for`](Self::call_tool_for)'s. A modern server is asked to log at
    /// `log_level` (the client's, else the config's) and told `client_capabilities` (a
    /// 2026-07-28 client's, as it sent them, who then gets the server's questions in the
    /// result to answer itself; else ours). Progress the server reports goes to `progress`.
    pub async fn call_direct(
        &self,
        tool: &str,
        arguments: Option<&serde_json::value::RawValue>,
        log_level: Option<&str>,
        client_capabilities: Option<&serde_json::value::RawValue>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> Result<DirectReply, McpError> {
        let session = self.live().await?;
        let Some(lane) = session.process.as_ref().map(|p| p.lane().clone()) else {
            return Ok(DirectReply::FullPath);
        };
        // The `_meta` entries, comma-separated, without braces.
        let mut meta = String::new();
        if self.summary.era == ProtocolEra::Modern {
            let (start, ours) = session.direct_meta.get_or_init(|| modern_meta(&session));
            let level = log_level.map(str::to_string).or_else(|| {
                self.log_level
                    .and_then(|l| serde_json::to_value(l).ok())
                    .and_then(|l| l.as_str().map(str::to_string))
            });
            let capabilities = client_capabilities.map_or(ours.as_str(), |c| c.get());
            meta.reserve(start.len() + capabilities.len() + 80);
            meta.push_str(start.strip_prefix('{').unwrap_or(start));
            meta.push_str(",\"io.modelcontextprotocol/clientCapabilities\":");
            meta.push_str(capabilities);
            if let Some(level) = level {
                meta.push_str(",\"io.modelcontextprotocol/logLevel\":");
                meta.push_str(&Value::String(level).to_string());
            }
        }
        let name = serde_json::to_string(tool).unwrap_or_default();
        // The call's id is its progress token; the lane routes its progress.
        let wants_progress = progress.is_some();
        let write = |line: &mut Vec<u8>, id: &str| {
            line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            line.extend_from_slice(id.as_bytes());
            line.extend_from_slice(b",\"method\":\"tools/call\",\"params\":{\"name\":");
            line.extend_from_slice(name.as_bytes());
            if let Some(arguments) = arguments {
                line.extend_from_slice(b",\"arguments\":");
                line.extend_from_slice(arguments.get().as_bytes());
            }
            if wants_progress {
                if !meta.is_empty() {
                    meta.push(',');
                }
                meta.push_str("\"progressToken\":");
                meta.push_str(id);
            }
            if !meta.is_empty() {
                line.extend_from_slice(b",\"_meta\":{");
                line.extend_from_slice(meta.as_bytes());
                line.push(b'}');
            }
            line.extend_from_slice(b"}}");
        };
        // Named only when something goes wrong: no allocation on the hot path otherwise.
        let operation = || format!("tool \"{tool}\"");
        let answer =
            match tokio::time::timeout(self.config.timeout, lane.call(write, progress)).await {
                Ok(Ok(line)) => line,
                Ok(Err(crate::direct_lane::LaneError::NotReading)) => {
                    return Err(McpError::Unreachable {
                        server: self.config.name.clone(),
                        detail: format!(
                            "{}: the server has not read the last 16 MB it was sent",
                            operation()
                        ),
                    });
                }
                Ok(Err(crate::direct_lane::LaneError::Closed)) => {
                    return Err(McpError::Unreachable {
                        server: self.config.name.clone(),
                        detail: format!("{}: {}", operation(), session.why_gone().await),
                    });
                }
                Err(_) => {
                    return Err(McpError::Timeout {
                        server: self.config.name.clone(),
                        operation: operation(),
                        after: self.config.timeout,
                        hint: None,
                    });
                }
            };
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
            error: Option<rmcp::model::ErrorData>,
        }
        #[derive(serde::Deserialize)]
        struct Kind<'a> {
            #[serde(rename = "resultType", borrow)]
            result_type: Option<std::borrow::Cow<'a, str>>,
        }
        let answer: Answer<'_> =
            serde_json::from_slice(&answer).map_err(|e| self.schema_mismatch(&operation(), e))?;
        match (answer.result, answer.error) {
            (_, Some(error)) => {
                self.outcome::<DirectReply>(
                    &session,
                    &operation(),
                    Err(ServiceError::McpError(error)),
                )
                .await
            }
            (Some(result), None) => {
                let kind: Kind<'_> = serde_json::from_str(result.get())
                    .map_err(|e| self.schema_mismatch(&operation(), e))?;
                // Questions for the client (2026-07-28): a modern client answers them itself in its
                // retry; for anyone else rmcp's rounds answer them, on the full path.
                if kind.result_type.is_some_and(|t| t != "complete")
                    && client_capabilities.is_none()
                {
                    return Ok(DirectReply::FullPath);
                }
                Ok(DirectReply::Result(result.to_owned()))
            }
            (None, None) => Err(self.schema_mismatch(
                &operation(),
                "its answer has neither \"result\" nor \"error\"",
            )),
        }
    }

    /// The error for an input-required result that reached a caller with no client to ask.
    fn unanswered(&self, operation: &str) -> McpError {
        McpError::Unreachable {
            server: self.config.name.clone(),
            detail: format!("{operation}: the server still asks for input after our answers"),
        }
    }

    /// The server's tasks (`tasks/list`, MCP 2025-11-25), as it describes them: `taskId`,
    /// `status`, `statusMessage`, times. Empty when it declares no task listing.
    pub async fn list_tasks(&self) -> Result<Vec<Value>, McpError> {
        if !self.summary.has_capability("tasks.list") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let peer = session.client.peer();
        let outcome = crate::tasks::list(peer, self.config.timeout).await;
        self.outcome(&session, "tasks/list", outcome).await
    }

    /// One task's state as the server describes it (`tasks/get`, either era): `taskId`,
    /// `status`, `statusMessage`, and the result or error once it has ended.
    pub async fn task(&self, task_id: &str) -> Result<Value, McpError> {
        let session = self.live().await?;
        let peer = session.client.peer();
        let operation = format!("task \"{task_id}\"");
        let outcome = if self.summary.era == ProtocolEra::Modern {
            let get = peer.get_task(rmcp::model::GetTaskParams::new(task_id));
            crate::tasks::within(self.config.timeout, get)
                .await
                .map(|task| serde_json::to_value(task).unwrap_or_default())
        } else {
            crate::tasks::get(peer, task_id, self.config.timeout).await
        };
        self.outcome(&session, &operation, outcome).await
    }

    /// Remembers that `tool` runs only as a task, for the calls after this one.
    fn mark_task_tool(&self, tool: &str) {
        if let Ok(mut tools) = self.task_tools.lock() {
            tools.insert(tool.to_string());
        }
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

    /// Sends `tools/call` with a progress token we know, so the server's progress reaches
    /// the caller. Dropping the future cancels the call on the server.
    async fn call_with_progress(
        &self,
        session: &Session,
        params: &CallToolRequestParams,
        progress: Option<UnboundedSender<Progress>>,
        forwarding: Option<&Forwarding>,
    ) -> Result<Value, ServiceError> {
        let peer = session.client.peer();
        let task_progress = progress.clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
        let options = self.request_options(forwarding);
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let timed_out = || ServiceError::Timeout {
            timeout: self.config.timeout,
        };
        let sent =
            tokio::time::timeout_at(deadline, peer.send_request_with_option(request, options));
        let handle = sent.await.map_err(|_| timed_out())??;
        let mut guard = InFlight {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
            token: token_key(&handle.progress_token),
            routes: self.progress.clone(),
            cancellations: self.cancellations.clone(),
            reason: "cancelled by the user".into(),
        };
        if let (Some(sender), Ok(mut routes)) = (progress, self.progress.lock()) {
            routes.insert(guard.token.clone(), ProgressRoute { sender, last: None });
        }
        // A question of the server's to a person pauses this deadline (person_wait).
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok(result) = self.pauses.limit(remaining, handle.await_response()).await else {
            guard.reason = format!(
                "timed out after {} (the client's limit)",
                crate::error::fmt_duration(self.config.timeout)
            );
            return Err(timed_out());
        };
        guard.id = None;
        // Serialising rmcp's own types cannot fail (string keys only); `Null` would then
        // surface as a schema mismatch in `convert`.
        fn to_value(value: &impl Serialize) -> Value {
            serde_json::to_value(value).unwrap_or_default()
        }
        match result? {
            ServerResult::CallToolResult(result) => Ok(to_value(&result)),
            // A modern server made the call a task (the tasks extension we declare).
            ServerResult::CreateTaskResult(created) => {
                let host = (self.host.as_ref(), self.config.name.as_str());
                crate::tasks::follow(peer, host, created.task, self.config.timeout, task_progress)
                    .await
            }
            // The questions are for the client we forward for: it answers and retries.
            ServerResult::InputRequiredResult(questions)
                if forwarding.is_some_and(|f| f.input.is_some()) =>
            {
                Ok(to_value(&questions))
            }
            // A modern server needs input first: rmcp's helper runs the rounds through our
            // handler and re-issues the call, which MRTR makes safe (the server is stateless).
            ServerResult::InputRequiredResult(_) => {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                let rounds = self
                    .pauses
                    .limit(remaining, session.client.call_tool(params.clone()));
                Ok(to_value(&rounds.await.map_err(|_| timed_out())??))
            }
            other => Ok(to_value(&other)),
        }
    }

    /// Options for a request to this server: the forwarded trace context and, on a modern one,
    /// the `_meta` that 2026-07-28 carries per request (it has no `logging/setLevel`), with the
    /// forwarded client's capabilities and log level in place of ours.
    fn request_options(&self, forwarding: Option<&Forwarding>) -> PeerRequestOptions {
        let options = PeerRequestOptions::no_options();
        let modern = self.summary.era == ProtocolEra::Modern;
        let mut meta = forwarding.and_then(|f| f.meta(modern)).unwrap_or_default();
        if modern
            && forwarding.is_none_or(|f| f.log_level.is_none())
            && let Some(level) = self.log_level
        {
            meta.set_log_level(level);
        }
        if meta.is_empty() {
            options
        } else {
            options.with_meta(meta)
        }
    }

    /// Sends a prompt or resource request on another client's behalf, under the server's
    /// timeout, and returns the result's JSON as the server sent it (an input-required result
    /// included).
    async fn forward(
        &self,
        session: &Session,
        operation: &str,
        request: ClientRequest,
        forwarding: &Forwarding,
    ) -> Result<Value, McpError> {
        let peer = session.client.peer();
        let options = self.request_options(Some(forwarding));
        let sent = async {
            peer.send_request_with_option(request, options)
                .await?
                .await_response()
                .await
        };
        let result = self.request(session, operation, sent).await?;
        Ok(serde_json::to_value(result).unwrap_or_default())
    }

    /// Asks to be told when `uri` changes (`resources/subscribe` on legacy servers, a
    /// `subscriptions/listen` stream on modern ones); see [`take_updated`](Self::take_updated).
    pub async fn subscribe(&self, uri: &str) -> Result<(), McpError> {
        if !self.summary.has_capability("resources.subscribe") {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\" does not offer resource subscriptions",
                self.config.name
            )));
        }
        let operation = format!("subscribing to \"{uri}\"");
        let session = self.live().await?;
        if self.summary.era == ProtocolEra::Legacy {
            let subscribe = session
                .client
                .subscribe(rmcp::model::SubscribeRequestParams::new(uri));
            return self.request(&session, &operation, subscribe).await;
        }
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resource_subscription(uri)
            .build();
        let mut subscription = self
            .request(&session, &operation, session.client.listen(filter))
            .await?;
        // The tap has already seen each notification; draining keeps the stream open.
        let drain =
            tokio::spawn(async move { while let Ok(Some(_)) = subscription.next().await {} });
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(drain);
        }
        Ok(())
    }

    /// Tells a legacy server the host's roots changed (`notifications/roots/list_changed`);
    /// it will ask for them again. Modern servers ask with each request, so there is nothing
    /// to send.
    pub async fn roots_changed(&self) -> Result<(), McpError> {
        if self.summary.era == ProtocolEra::Modern {
            return Ok(());
        }
        let session = self.live().await?;
        self.request(
            &session,
            "roots/list_changed",
            session.client.notify_roots_list_changed(),
        )
        .await
    }

    /// URIs the server said changed since the last call, oldest first, without repeats.
    pub fn take_updated(&self) -> Vec<String> {
        self.stale
            .resources
            .lock()
            .map(|mut uris| std::mem::take(&mut *uris))
            .unwrap_or_default()
    }

    /// Completion values for an argument of a prompt (`prompt`) or of a resource template
    /// (`template`), given what was typed so far (`completion/complete`).
    pub async fn complete(
        &self,
        target: Completion<'_>,
        argument: &str,
        value: &str,
        context: &std::collections::HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        let operation = format!("completing \"{argument}\"");
        if !self.summary.has_capability("completions") {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\" does not offer completion (it declares no \"completions\" capability)",
                self.config.name
            )));
        }
        let session = self.live().await?;
        // Earlier arguments narrow what the server suggests (a country before its cities).
        let context = (!context.is_empty())
            .then(|| rmcp::model::CompletionContext::with_arguments(context.clone()));
        let info = match target {
            Completion::Prompt(name) => {
                self.request(
                    &session,
                    &operation,
                    session
                        .client
                        .complete_prompt_argument(name, argument, value, context),
                )
                .await?
            }
            Completion::Template(template) => {
                self.request(
                    &session,
                    &operation,
                    session
                        .client
                        .complete_resource_argument(template, argument, value, context),
                )
                .await?
            }
        };
        Ok(info.values)
    }

    /// Its resources (all pages).
    pub async fn list_resources(&self) -> Result<Vec<Resource>, McpError> {
        if !self.summary.has_capability("resources") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let list = self
            .request(
                &session,
                "resources/list",
                all_pages(|page| session.client.list_resources(page)),
            )
            .await;
        let Some(list) = optional_list(list)? else {
            return Ok(Vec::new());
        };
        self.convert("resources/list", list)
    }

    /// Its resource templates (all pages).
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, McpError> {
        if !self.summary.has_capability("resources") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let list = self
            .request(
                &session,
                "resources/templates/list",
                all_pages(|page| session.client.list_resource_templates(page)),
            )
            .await;
        let Some(list) = optional_list(list)? else {
            return Ok(Vec::new());
        };
        self.convert("resources/templates/list", list)
    }

    /// Reads one resource.
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<ResourceContents>, McpError> {
        let operation = format!("reading \"{uri}\"");
        let params = self.convert(&operation, serde_json::json!({ "uri": uri }))?;
        let session = self.live().await?;
        let result = self
            .request(&session, &operation, session.client.read_resource(params))
            .await?;
        let value = serde_json::to_value(result).unwrap_or_default();
        self.convert(
            &operation,
            value.get("contents").cloned().unwrap_or_default(),
        )
    }

    /// Its prompts (all pages).
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, McpError> {
        if !self.summary.has_capability("prompts") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let list = self
            .request(
                &session,
                "prompts/list",
                all_pages(|page| session.client.list_prompts(page)),
            )
            .await;
        let Some(list) = optional_list(list)? else {
            return Ok(Vec::new());
        };
        self.convert("prompts/list", list)
    }

    /// Expands a prompt with its arguments.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<PromptResult, McpError> {
        let operation = format!("prompt \"{name}\"");
        let params = self.convert(
            &operation,
            serde_json::json!({ "name": name, "arguments": arguments }),
        )?;
        let session = self.live().await?;
        let result = match self
            .request(&session, &operation, session.client.get_prompt(params))
            .await
        {
            Ok(result) => result,
            Err(error @ McpError::Rpc { .. }) => {
                // Servers word "no such prompt" differently; name it the same way for all.
                let prompts = self.list_prompts().await.unwrap_or_default();
                if prompts.is_empty() || prompts.iter().any(|p| p.name == name) {
                    return Err(error);
                }
                return Err(McpError::UnknownItem {
                    server: self.config.name.clone(),
                    what: "prompt",
                    name: name.to_string(),
                    suggestions: near_matches(name, prompts.iter().map(|p| p.name.as_str())),
                });
            }
            Err(error) => return Err(error),
        };
        self.convert(&operation, result)
    }

    /// [`get_prompt`](Self::get_prompt) on another client's behalf: for a client that takes
    /// input-required results, its answers go upstream and the server's questions come back.
    pub async fn get_prompt_for(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        forwarding: &Forwarding,
    ) -> Result<Reply<PromptResult>, McpError> {
        let Some(round) = &forwarding.input else {
            return self.get_prompt(name, arguments).await.map(Reply::Complete);
        };
        let operation = format!("prompt \"{name}\"");
        let mut params: rmcp::model::GetPromptRequestParams = self.convert(
            &operation,
            serde_json::json!({ "name": name, "arguments": arguments }),
        )?;
        params.input_responses = round.rmcp_responses();
        params.request_state = round.state.clone();
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        let session = self.live().await?;
        let result = self
            .forward(&session, &operation, request, forwarding)
            .await?;
        self.reply(&operation, result)
    }

    /// [`read_resource`](Self::read_resource) on another client's behalf, as
    /// [`get_prompt_for`](Self::get_prompt_for).
    pub async fn read_resource_for(
        &self,
        uri: &str,
        forwarding: &Forwarding,
    ) -> Result<Reply<Vec<ResourceContents>>, McpError> {
        let Some(round) = &forwarding.input else {
            return self.read_resource(uri).await.map(Reply::Complete);
        };
        let operation = format!("reading \"{uri}\"");
        let mut params: rmcp::model::ReadResourceRequestParams =
            self.convert(&operation, serde_json::json!({ "uri": uri }))?;
        params.input_responses = round.rmcp_responses();
        params.request_state = round.state.clone();
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
        let session = self.live().await?;
        let mut result = self
            .forward(&session, &operation, request, forwarding)
            .await?;
        if !input_rounds::is_input_required(&result) {
            result = result.get("contents").cloned().unwrap_or_default();
        }
        self.reply(&operation, result)
    }

    /// A forwarded request's result JSON as ours, or the questions it asks.
    fn reply<T: DeserializeOwned>(
        &self,
        operation: &str,
        result: Value,
    ) -> Result<Reply<T>, McpError> {
        if input_rounds::is_input_required(&result) {
            return Ok(Reply::InputRequired(InputRequired { result }));
        }
        self.convert(operation, result).map(Reply::Complete)
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

/// A page of a paginated list.
trait Page {
    type Item;
    fn split(self) -> (Vec<Self::Item>, Option<String>);
}

macro_rules! page {
    ($result:ty, $items:ident, $item:ty) => {
        impl Page for $result {
            type Item = $item;
            fn split(self) -> (Vec<$item>, Option<String>) {
                (self.$items, self.next_cursor)
            }
        }
    };
}
page!(rmcp::model::ListToolsResult, tools, rmcp::model::Tool);
page!(rmcp::model::ListPromptsResult, prompts, rmcp::model::Prompt);
page!(
    rmcp::model::ListResourcesResult,
    resources,
    rmcp::model::Resource
);
page!(
    rmcp::model::ListResourceTemplatesResult,
    resource_templates,
    rmcp::model::ResourceTemplate
);

/// The most pages one listing may take: far beyond any real server, near enough that a server
/// whose cursors never end is stopped before it costs much memory.
const MAX_PAGES: usize = 1_000;

/// The most items one listing may hold (tools, resources, prompts): ten times the largest real
/// catalogue we know (BFCL's 1,853 tools in one server).
pub const MAX_LISTED_ITEMS: usize = 20_000;

/// The most bytes (as JSON) one listing may hold: a catalogue past it costs gigabytes of
/// memory and minutes of indexing before the first request.
pub const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;

/// Counts what is written to it.
struct Tally(usize);

impl std::io::Write for Tally {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The listing, `count` items with `page` the last of them, is past a cap: why, in words.
/// `bytes` carries the size of the pages before.
fn over_caps<T: serde::Serialize>(count: usize, bytes: &mut usize, page: &[T]) -> Option<String> {
    if count > MAX_LISTED_ITEMS {
        return Some(format!(
            "the server listed more than {MAX_LISTED_ITEMS} items, the most one server may list"
        ));
    }
    let mut tally = Tally(0);
    for item in page {
        let _ = serde_json::to_writer(&mut tally, item);
    }
    *bytes += tally.0;
    (*bytes > MAX_LISTED_BYTES).then(|| {
        format!(
            "the listing is over {} MiB, the most one server may list",
            MAX_LISTED_BYTES / (1024 * 1024)
        )
    })
}

/// Every page of a list. Unlike rmcp's `list_all_*`, stops a server that repeats a cursor or
/// pages without end (those would otherwise grow the list until the request timed out).
async fn all_pages<P: Page, Fut>(
    mut list: impl FnMut(Option<rmcp::model::PaginatedRequestParams>) -> Fut,
) -> Result<Vec<P::Item>, ServiceError>
where
    Fut: Future<Output = Result<P, ServiceError>>,
    P::Item: serde::Serialize,
{
    let params = |cursor| Some(rmcp::model::PaginatedRequestParams::default().with_cursor(cursor));
    let (mut items, mut cursor) = list(params(None)).await?.split();
    let mut bytes = 0;
    let too_big = |why: String| {
        ServiceError::McpError(rmcp::ErrorData::internal_error(
            format!("listing refused: {why}"),
            None,
        ))
    };
    if let Some(why) = over_caps(items.len(), &mut bytes, &items) {
        return Err(too_big(why));
    }
    let mut seen = std::collections::HashSet::new();
    while let Some(next) = cursor {
        let broken = if !seen.insert(next.clone()) {
            Some(format!("the server sent the cursor \"{next}\" twice"))
        } else if seen.len() >= MAX_PAGES {
            Some(format!("the listing did not end after {MAX_PAGES} pages"))
        } else {
            None
        };
        if let Some(why) = broken {
            return Err(ServiceError::McpError(rmcp::ErrorData::internal_error(
                format!("pagination that never ends: {why}"),
                None,
            )));
        }
        let (page, next) = list(params(Some(next))).await?.split();
        if let Some(why) = over_caps(items.len() + page.len(), &mut bytes, &page) {
            return Err(too_big(why));
        }
        items.extend(page);
        cursor = next;
    }
    Ok(items)
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

/// Connects over the legacy HTTP+SSE transport; that era always starts with `initialize`.
async fn serve_sse(
    session: ClientSession,
    tap: &NotificationTap,
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
    timeout: Duration,
) -> Result<RunningService<RoleClient, ClientSession>, String> {
    let headers: HashMap<String, String> = headers.clone().into_iter().collect();
    let transport = crate::sse::SseTransport::connect(url, &headers, timeout)
        .await
        .map_err(|e| e.to_string())?;
    session
        .serve_with_lifecycle(tapped(transport, tap), ClientLifecycleMode::Initialize)
        .await
        .map_err(|e| error_chain(&e))
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

/// Why nothing answers at `url`, in words, when a plain TCP connection says so (refused,
/// unknown host, timed out); `None` when the address takes connections (the problem is
/// higher up, and the transport's error says what).
async fn unreachable_reason(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = parsed.port_or_known_default()?;
    let attempt = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await;
    match attempt {
        Ok(Ok(_)) => None,
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => Some(format!(
            "connection refused: nothing listens on {host}:{port} (is the server running, and is the port right?)"
        )),
        Ok(Err(error)) => Some(format!("{host}:{port}: {error}")),
        Err(_) => Some(format!("{host}:{port} did not answer within 3s")),
    }
}

fn summarize(client: &RunningService<RoleClient, ClientSession>) -> ServerSummary {
    let info = client.peer_info();
    let protocol_version = info
        .as_ref()
        .and_then(|i| serde_json::to_value(&i.protocol_version).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    let era = if protocol_version.as_str() >= FIRST_MODERN_VERSION {
        ProtocolEra::Modern
    } else {
        ProtocolEra::Legacy
    };
    let mut capabilities = Vec::new();
    if let Some(Value::Object(caps)) = info
        .as_ref()
        .and_then(|i| serde_json::to_value(&i.capabilities).ok())
    {
        for (name, value) in caps {
            if value.is_null() {
                continue;
            }
            // Tasks: 2025-11-25's capability (kept under `experimental` on its way past
            // rmcp) or 2026-07-28's extension.
            let tasks = match name.as_str() {
                "experimental" => value.get("tasks"),
                "extensions" => value.get(rmcp::model::TASKS_EXTENSION_ID),
                _ => None,
            };
            if let Some(tasks) = tasks {
                capabilities.push("tasks".into());
                for flag in ["list", "cancel"] {
                    if tasks.get(flag).is_some() {
                        capabilities.push(format!("tasks.{flag}"));
                    }
                }
                if tasks.pointer("/requests/tools/call").is_some() {
                    capabilities.push("tasks.requests.tools.call".into());
                }
            }
            capabilities.push(name.clone());
            if let Value::Object(flags) = value {
                for (flag, on) in flags {
                    if on == Value::Bool(true) {
                        capabilities.push(format!("{name}.{flag}"));
                    }
                }
            }
        }
    }
    let implementation = info.as_ref().and_then(|i| i.server_info.as_ref());
    ServerSummary {
        implementation: implementation.map(|i| i.name.clone()),
        version: implementation.map(|i| i.version.clone()),
        protocol_version,
        era,
        capabilities,
        instructions: info.as_ref().and_then(|i| i.instructions.clone()),
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
