//! Streamable HTTP for any [`McpService`]: rmcp's server transport (both protocol eras:
//! 2025-11-25 sessions, 2026-07-28 stateless requests) behind the checks a server reachable
//! over the network needs. Host and Origin are validated against DNS rebinding, bearer tokens
//! (static or JWT, see [`crate::serve_auth`]) are required when configured, request bodies are
//! capped, each client may have only so many requests in flight (429 beyond), `/healthz` and
//! `/readyz` answer probes and `/metrics` reports (see [`crate::serve_metrics`]). On shutdown
//! the listener closes and requests in flight are answered (up to a deadline) before sessions
//! end. The token stays here: nothing of the client's request
//! is passed to upstream servers; only the [`Principal`] it stands for travels with the request.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::connections::{
    AcceptBackoff, BusyGuard, ConnectionTable, OccasionalWarning, StallWatch, WRITE_STALL_TIMEOUT,
    default_max_connections,
};
use crate::direct_calls::{self, SessionDirectory};
use crate::http_answers::{Body, Holding, plain, read_body, refused, too_many, unreadable_message};
use crate::sealed_sessions::{SESSION_HEADER, SealedSessions};
use crate::serve::{McpService, ServedService};
use crate::serve_auth::{Authenticator, JwtSettings, Principal, StaticToken};
use crate::serve_metrics::{Readiness, ServeMetrics};

/// The path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// How the HTTP endpoint admits requests.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Bearer tokens that are accepted, each with its tool allow-list; with no tokens and no
    /// JWT settings every request is admitted (loopback only, which the front end enforces).
    pub tokens: Vec<StaticToken>,
    /// JWTs accepted besides the static tokens.
    pub jwt: Option<JwtSettings>,
    /// Host names (or `host:port`) accepted in the `Host` header besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`https://app.example.com:443`); a request carrying any other
    /// `Origin` is refused with 403. Requests without `Origin` (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The secret every replica shares, from which the key that seals 2025-11-25 session ids
    /// is derived; `None`: a random key, so sessions live on this replica only.
    pub session_key: Option<String>,
    /// Requests one client (a token's principal, else a peer address) may have in flight;
    /// more are refused with 429 and a JSON-RPC error.
    pub max_in_flight_per_client: usize,
    /// 2025-11-25 sessions open at once, all clients together; a new one beyond is refused
    /// with 503.
    pub max_sessions: usize,
    /// 2025-11-25 sessions one client may have open; a new one beyond is refused with 429.
    pub max_sessions_per_client: usize,
    /// How long a session may go unused before it is closed (and its memory freed).
    pub session_idle: Duration,
    /// How long requests in flight may take to finish once shutdown begins.
    pub drain_timeout: Duration,
    /// Connections open at once; at the cap a new one closes the longest-idle one (see
    /// [`crate::connections`]). 0: [`crate::connections::default_max_connections`].
    pub max_connections: usize,
    /// How long an answer may wait on a client that reads none of it before the connection is
    /// closed and the answer dropped.
    pub write_stall_timeout: Duration,
    /// Metrics the endpoint and the service behind it record (`/metrics`).
    pub metrics: Arc<ServeMetrics>,
    /// The service's readiness and upstream health (`/readyz`); `None`: ready while serving.
    pub readiness: Option<Arc<dyn Readiness>>,
}

impl std::fmt::Debug for dyn Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readiness")
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            tokens: Vec::new(),
            jwt: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            session_key: None,
            max_in_flight_per_client: 64,
            max_sessions: 10_000,
            max_sessions_per_client: 1_000,
            session_idle: Duration::from_secs(300),
            drain_timeout: Duration::from_secs(30),
            max_connections: 0,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
            metrics: ServeMetrics::new(),
            readiness: None,
        }
    }
}

/// How long a client may take to send a request's headers before its connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `factory`'s services (one per 2025-11-25 session or per stateless request) on
/// `listener` until `shutdown` is cancelled, then stops accepting, lets the requests in flight
/// finish (up to `options.drain_timeout`) and ends every session.
pub async fn serve_http<S, F>(
    listener: TcpListener,
    factory: F,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<(), String>
where
    S: McpService + ?Sized,
    F: Fn() -> Arc<S> + Send + Sync + 'static,
{
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    // Sessions and connections end at `hard_stop`, after the drain, not at `shutdown`.
    let hard_stop = CancellationToken::new();
    let _stop_on_return = hard_stop.clone().drop_guard();
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.push(local.ip().to_string());
    hosts.extend(options.allowed_hosts.iter().cloned());
    let origins: Vec<String> = own_origins(local.port())
        .chain(options.allowed_origins.iter().cloned())
        .collect();
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts.clone())
        .with_allowed_origins(origins.clone())
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(hard_stop.child_token())
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    config = config.enforce_origin_validation();
    let sessions = Arc::new(SealedSessions::new(options.session_key.as_deref())?);
    config.session_store = Some(sessions.clone());
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(options.session_idle);
    let manager = Arc::new(manager);
    let factory: direct_calls::Factory<S> = Arc::new(factory);
    let directory = Arc::new(SessionDirectory::<S>::new(
        options.session_idle,
        factory.clone(),
    ));
    let listed = directory.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(ServedService::new(factory()).listed_in(listed.clone())),
        manager.clone(),
        config,
    );
    let max_connections = match options.max_connections {
        0 => default_max_connections(),
        n => n,
    };
    let connections = ConnectionTable::new(max_connections);
    let edge = Arc::new(Edge {
        authenticator: Authenticator::new(options.tokens, options.jwt),
        sessions,
        manager,
        metrics: options.metrics.clone(),
        readiness: options.readiness.clone(),
        limit: options.max_in_flight_per_client.max(1),
        max_body_bytes: options.max_body_bytes,
        connections: connections.clone(),
        max_sessions: options.max_sessions.max(1),
        max_sessions_per_client: options.max_sessions_per_client.max(1),
        session_idle: options.session_idle,
        sessions_by_client: Mutex::default(),
        clients: Mutex::default(),
        in_flight: AtomicUsize::new(0),
        drained: Notify::new(),
        draining: AtomicBool::new(false),
        refusal_warning: OccasionalWarning::default(),
        hosts,
        origins,
    });
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.reset();
                    accepted
                }
                Err(error) => {
                    // Out of file descriptors (EMFILE, ENFILE) or memory, accepting again at
                    // once fails again at once: the loop would spin and log without end.
                    let pause = backoff.failed(&error);
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(pause) => continue,
                    }
                }
            },
        };
        // Answers are small writes (headers, then SSE events); Nagle would hold them back.
        let _ = stream.set_nodelay(true);
        let Some(registered) = connections.register() else {
            edge.metrics.connection_closed("busy");
            continue;
        };
        // A connection closed to make room still holds its descriptor for a moment.
        connections.within_cap().await;
        let mcp = mcp.clone();
        let edge = edge.clone();
        let directory = directory.clone();
        let shutdown = hard_stop.clone();
        let stall = options.write_stall_timeout;
        let edge_metrics = edge.metrics.clone();
        tokio::spawn(async move {
            let activity = registered.activity.clone();
            let requests = activity.clone();
            // Written once per connection: a client without a principal is counted by it.
            let peer_name: Arc<str> = peer.ip().to_string().into();
            let service = hyper::service::service_fn(move |request| {
                let mut mcp = mcp.clone();
                let peer_name = peer_name.clone();
                let edge = edge.clone();
                let directory = directory.clone();
                // Busy until the answer is handed to the socket, so a connection with an
                // answer (or an open stream) is never the one closed to make room.
                let mut busy = Some(requests.busy());
                async move {
                    let response = route(
                        request,
                        &mut mcp,
                        &edge,
                        &directory,
                        (peer, &peer_name),
                        &mut busy,
                    )
                    .await;
                    // An MCP answer took the mark with its own bookkeeping (one wrapper, not
                    // two, on the hot path); the edge's own answers get it here.
                    Ok::<_, Infallible>(match busy {
                        Some(busy) => response.map(|inner| Holding { inner, _held: busy }.boxed()),
                        None => response,
                    })
                }
            });
            // A client that never finishes its headers (or sends none) holds a file
            // descriptor; hyper closes it after the header read timeout, once it has a timer.
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(
                    TokioIo::new(StallWatch::new(stream, activity.clone())),
                    service,
                );
            tokio::select! {
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%error, %peer, "HTTP connection ended");
                    }
                }
                _ = shutdown.cancelled() => {}
                _ = registered.stop.cancelled() => {
                    edge_metrics.connection_closed("idle");
                    tracing::debug!(%peer, "closed an idle connection to make room for a new one");
                }
                _ = activity.stalled_for(stall) => {
                    edge_metrics.connection_closed("stalled");
                    tracing::info!(%peer, "closed a connection whose client read none of its answer for {}s (--write-stall-timeout)", stall.as_secs());
                }
            }
        });
    }
    // Drain: the listener is closed (dropped below); answer what is in flight, then stop.
    edge.draining.store(true, Ordering::SeqCst);
    drop(listener);
    let pending = edge.in_flight.load(Ordering::SeqCst);
    if pending > 0 {
        tracing::info!("draining {pending} request(s) in flight");
        let drained = async {
            loop {
                let notified = edge.drained.notified();
                tokio::pin!(notified);
                // Listening before looking: a last request that ends in between still wakes us.
                notified.as_mut().enable();
                if edge.in_flight.load(Ordering::SeqCst) == 0 {
                    break;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(options.drain_timeout, drained)
            .await
            .is_err()
        {
            tracing::warn!(
                "requests still in flight after {:?}; stopping anyway",
                options.drain_timeout
            );
        }
    }
    hard_stop.cancel();
    Ok(())
}

/// What the HTTP edge checks and translates before rmcp sees a request.
struct Edge {
    authenticator: Authenticator,
    sessions: Arc<SealedSessions>,
    manager: Arc<LocalSessionManager>,
    metrics: Arc<ServeMetrics>,
    readiness: Option<Arc<dyn Readiness>>,
    /// Requests each client may have in flight.
    limit: usize,
    /// Largest request body, in bytes.
    max_body_bytes: usize,
    /// The open connections (counted in `/metrics`).
    connections: Arc<ConnectionTable>,
    /// Sessions open at once, all clients together.
    max_sessions: usize,
    /// Sessions each client may have open.
    max_sessions_per_client: usize,
    /// How long a session may go unused (said in a refusal).
    session_idle: Duration,
    /// rmcp's ids of the sessions each client opened here; ids rmcp no longer has are dropped
    /// when the client opens another.
    sessions_by_client: Mutex<HashMap<String, std::collections::HashSet<String>>>,
    /// Each client's in-flight permits, by principal name or peer address.
    clients: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Requests in flight, counted for the drain.
    in_flight: AtomicUsize,
    /// Wakes the drain when the last request in flight ends.
    drained: Notify,
    /// Shutdown has begun: `/readyz` says so.
    draining: AtomicBool,
    /// Refused sessions, said now and then (a flood of them must not flood the log).
    refusal_warning: OccasionalWarning,
    /// Host names the endpoint answers to (rmcp checks them on the MCP path; the edge on the
    /// paths it serves itself).
    hosts: Vec<String>,
    /// Browser origins accepted, the endpoint's own included.
    origins: Vec<String>,
}

impl Edge {
    /// Lets the session rmcp just opened for `client` (`local`, its own id) stay, or closes it
    /// and returns the refusal: 429 past the client's cap, 503 past the total. Counted after
    /// the fact because only rmcp knows whether a POST opened a session.
    async fn admit_session(&self, client: &str, local: &str) -> Option<Response<Body>> {
        let (total, mine) = {
            let open = self.manager.sessions.read().await;
            let mut by_client = self.sessions_by_client.lock().ok()?;
            let mine = by_client.entry(client.to_string()).or_default();
            mine.retain(|id| open.contains_key(id.as_str()));
            (open.len(), mine.len())
        };
        let idle = self.session_idle.as_secs();
        let refusal = if mine >= self.max_sessions_per_client {
            Some((
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "client \"{client}\" has {mine} sessions open, the most one client may have (--max-sessions-per-client); end one with DELETE, or wait: a session unused for {idle} s is closed"
                ),
            ))
        } else if total > self.max_sessions {
            Some((
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the gateway has {} sessions open, its most (--max-sessions); try again later: a session unused for {idle} s is closed",
                    total - 1
                ),
            ))
        } else {
            None
        };
        let Some((status, message)) = refusal else {
            if let Ok(mut by_client) = self.sessions_by_client.lock() {
                by_client
                    .entry(client.to_string())
                    .or_default()
                    .insert(local.to_string());
            }
            self.metrics.sessions_open(total);
            return None;
        };
        let id: rmcp::transport::streamable_http_server::session::SessionId = local.into();
        let _ = self.manager.close_session(&id).await;
        self.sessions.drop_fresh(local);
        if let Some(refused) = self.refusal_warning.due() {
            tracing::warn!(client, refused, "{message}");
        }
        let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": message}});
        let mut response = plain(status, &body.to_string());
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        Some(response)
    }

    /// 403 for a request whose `Host` is not one of ours or whose `Origin` is foreign: a page a
    /// DNS-rebinding attack points at this port must not read `/metrics` (server and tool names,
    /// clients) any more than call a tool, token or not.
    fn rebinding_refusal<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        let header = |name| {
            request
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap_or_default().to_string())
        };
        if let Some(host) = header(hyper::header::HOST) {
            let name = match host.strip_prefix('[') {
                Some(rest) => rest.split(']').next().unwrap_or_default().to_string(),
                None => host.split(':').next().unwrap_or_default().to_string(),
            };
            if !self
                .hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(&name))
            {
                return Some(plain(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "Host \"{host}\" is not this gateway's; add it with --allow-host if it is"
                    ),
                ));
            }
        }
        if let Some(origin) = header(hyper::header::ORIGIN)
            && !self.origins.iter().any(|allowed| allowed == &origin)
        {
            return Some(plain(
                StatusCode::FORBIDDEN,
                &format!(
                    "Origin \"{origin}\" is not allowed; add it with --allow-origin if it should be"
                ),
            ));
        }
        None
    }
}

/// Keeps one request counted as in flight (and its client's permit) until its response body,
/// which for a streamed answer outlives the handler, is done or dropped.
struct InFlight {
    edge: Arc<Edge>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.edge.metrics.in_flight().dec();
        // Only a draining gateway waits for the count to reach zero; a watch channel here
        // cost every request a lock and a wake-up pass.
        if self.edge.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && self.edge.draining.load(Ordering::SeqCst)
        {
            self.edge.drained.notify_waiters();
        }
    }
}

impl Edge {
    /// Counts a request as in flight for `client`, or `None` when the client is at its limit.
    fn admit(self: &Arc<Self>, client: &str, limited: bool) -> Option<InFlight> {
        let permit = if limited {
            let semaphore = {
                let mut clients = self.clients.lock().ok()?;
                // Forget idle clients now and then, so peers that come and go cost nothing.
                if clients.len() > 10_000 {
                    clients.retain(|_, s| s.available_permits() < self.limit);
                }
                match clients.get(client) {
                    Some(semaphore) => semaphore.clone(),
                    None => clients
                        .entry(client.to_string())
                        .or_insert_with(|| Arc::new(Semaphore::new(self.limit)))
                        .clone(),
                }
            };
            Some(semaphore.try_acquire_owned().ok()?)
        } else {
            None
        };
        self.metrics.in_flight().inc();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Some(InFlight {
            edge: self.clone(),
            _permit: permit,
        })
    }

    /// A sealed session id this replica holds becomes rmcp's own id for it; any other id
    /// passes unchanged (rmcp restores a sealed one it does not hold, and refuses the rest).
    /// A DELETE ends the session here for good. A session opened by another principal, or
    /// longer ago than `SESSION_MAX_AGE`, is refused as unknown (404), whoever holds it.
    async fn open_session_id<S: ?Sized>(
        &self,
        request: &mut Request<Full<Bytes>>,
        principal: Option<&str>,
        directory: &SessionDirectory<S>,
    ) -> Result<(), Response<Body>> {
        let Some(sealed) = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(());
        };
        let Some(opened) = self.sessions.identify(sealed) else {
            return Ok(());
        };
        if !opened.belongs_to(principal) || opened.expired() {
            let why = if opened.expired() {
                "it was opened more than 24 hours ago"
            } else {
                "it belongs to another client"
            };
            let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001,
                "message": format!("session not found: {why}; open a new one with initialize")}});
            let mut response = plain(StatusCode::NOT_FOUND, &body.to_string());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            return Err(response);
        }
        let local = opened.local;
        if request.method() == hyper::Method::DELETE {
            self.sessions.end(&local);
            // rmcp forgets the session at once but drops its service later: the hot path must
            // not serve it meanwhile.
            directory.forget(&local);
        }
        // A session whose service still lives is one rmcp's session worker holds (the hot
        // path's directory keeps a weak reference, upgraded only for the length of a call), so
        // rmcp's manager and its lock are not asked.
        if (directory.holds(&local)
            || matches!(
                self.manager.has_session(&local.as_str().into()).await,
                Ok(true)
            ))
            && let Ok(value) = hyper::header::HeaderValue::from_str(&local)
        {
            request.headers_mut().insert(SESSION_HEADER, value);
        }
        Ok(())
    }

    /// rmcp's id of a session it just created for `principal` becomes the sealed id the
    /// client keeps.
    fn seal_session_id(&self, response: &mut Response<Body>, principal: Option<&str>) {
        let Some(local) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        if let Some(sealed) = self.sessions.seal_fresh(local, principal)
            && let Ok(value) = hyper::header::HeaderValue::from_str(&sealed)
        {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
    }
}

/// The principal behind the request, when the endpoint authenticates (`Ok(None)` when it
/// does not).
async fn authenticate<B>(
    edge: &Edge,
    request: &Request<B>,
    peer: SocketAddr,
) -> Result<Option<Principal>, Response<Body>> {
    if !edge.authenticator.required() {
        return Ok(None);
    }
    let header = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match edge.authenticator.authenticate(header).await {
        Ok(principal) => Ok(Some(principal)),
        Err(refusal) => {
            tracing::info!(%peer, "refused a request: {refusal}");
            Err(refused(&refusal))
        }
    }
}

/// Answers one request; an MCP answer takes the connection's `busy` mark, held until the
/// answer is sent.
async fn route<M, S>(
    request: Request<Incoming>,
    mcp: &mut M,
    edge: &Arc<Edge>,
    directory: &SessionDirectory<S>,
    (peer, peer_name): (SocketAddr, &str),
    busy: &mut Option<BusyGuard>,
) -> Response<Body>
where
    M: Service<Request<Full<Bytes>>, Response = Response<Body>, Error = Infallible>,
    S: McpService + ?Sized,
{
    match request.uri().path() {
        "/healthz" => plain(StatusCode::OK, "ok"),
        "/readyz" => {
            let ready = if edge.draining.load(Ordering::SeqCst) {
                Err("shutting down".to_string())
            } else {
                edge.readiness.as_ref().map_or(Ok(()), |r| r.ready())
            };
            match ready {
                Ok(()) => plain(StatusCode::OK, "ready"),
                Err(why) => plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("not ready: {why}"),
                ),
            }
        }
        // Metrics name servers and tools, so they need a credential where requests do.
        "/metrics" => {
            if let Some(refusal) = edge.rebinding_refusal(&request) {
                return refusal;
            }
            if let Err(refusal) = authenticate(edge, &request, peer).await {
                return refusal;
            }
            if let Some(readiness) = &edge.readiness {
                readiness.observe(&edge.metrics);
            }
            edge.metrics
                .sessions_open(edge.manager.sessions.read().await.len());
            edge.metrics.connections_open(edge.connections.len());
            let mut response = plain(StatusCode::OK, &edge.metrics.render());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
        MCP_PATH => {
            let principal = match authenticate(edge, &request, peer).await {
                Ok(principal) => principal,
                Err(refusal) => {
                    edge.metrics.http_request(refusal.status().as_u16());
                    return refusal;
                }
            };
            let client: std::borrow::Cow<'_, str> = match &principal {
                Some(principal) => principal.name.clone().into(),
                None => peer_name.into(),
            };
            // The body is read before the request counts as in flight, so a client that
            // sends it slowly holds only its connection, and that for BODY_READ_TIMEOUT.
            let (mut request, body) = match read_body(request, edge.max_body_bytes).await {
                Ok(read) => read,
                Err(refusal) => {
                    edge.metrics.http_request(refusal.status().as_u16());
                    return refusal;
                }
            };
            // A client's open GET stream is not work in flight; its POSTs are.
            let limited = request.method() == hyper::Method::POST;
            let Some(in_flight) = edge.admit(&client, limited) else {
                edge.metrics.throttled(&client);
                edge.metrics.http_request(429);
                return too_many(&client, edge.limit);
            };
            // Sessions belong to the principal that opened them (none without authentication).
            let owner = principal.as_ref().map(|p| p.name.clone());
            if let Some(principal) = principal {
                request.extensions_mut().insert::<Principal>(principal);
            }
            if let Err(refusal) = edge
                .open_session_id(&mut request, owner.as_deref(), directory)
                .await
            {
                edge.metrics.http_request(refusal.status().as_u16());
                return refusal;
            }
            let ends_session = request.method() == hyper::Method::DELETE;
            let opens_session = request.method() == hyper::Method::POST
                && !request.headers().contains_key(SESSION_HEADER);
            let declared_json = request
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
            let session = request
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            // The checks rmcp makes of every request are made here for the hot path too (a
            // request that fails them goes on to rmcp, which refuses it as it always has).
            let direct = if !ends_session
                && declared_json
                && request.method() == hyper::Method::POST
                && edge.rebinding_refusal(&request).is_none()
            {
                direct_calls::serve(directory, session.as_deref(), &request, &body).await
            } else {
                None
            };
            let mut response = match direct {
                Some(response) => {
                    edge.metrics.hot_path_call();
                    response
                }
                None => {
                    if let Some(session) = &session {
                        directory.touch(session);
                    }
                    match mcp.call(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                }
            };
            // rmcp answers a session's DELETE 202; the official Python SDK client takes
            // anything but 200 or 204 for a failure and logs it on every close. The session is
            // ended either way, so 200 says so.
            if ends_session && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::OK;
            }
            // rmcp answers a JSON body it cannot read as a message 415, as if the media type
            // were wrong; JSON-RPC's answer is a parse error (or an invalid request), in HTTP 400.
            if declared_json && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                response = unreadable_message(response).await;
            }
            let opened = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .filter(|_| opens_session)
                .map(str::to_string);
            if let Some(local) = opened
                && let Some(refusal) = edge.admit_session(&client, &local).await
            {
                edge.metrics.http_request(refusal.status().as_u16());
                return refusal;
            }
            edge.seal_session_id(&mut response, owner.as_deref());
            edge.metrics.http_request(response.status().as_u16());
            let held = (in_flight, busy.take());
            response.map(|inner| Holding { inner, _held: held }.boxed())
        }
        other => plain(
            StatusCode::NOT_FOUND,
            &format!("no such path \"{other}\"; the MCP endpoint is {MCP_PATH}"),
        ),
    }
}

/// The gateway's own origin under each loopback name: a page the endpoint itself served is
/// same-origin, so it passes, while any other origin (a rebinding page's included) needs
/// `allowed_origins`.
fn own_origins(port: u16) -> impl Iterator<Item = String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .into_iter()
        .map(move |host| format!("http://{host}:{port}"))
}
