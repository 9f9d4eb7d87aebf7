//! Streamable HTTP for any [`McpService`]: rmcp's server transport (both protocol eras:
//! 2025-11-25 sessions, 2026-07-28 stateless requests) behind the checks a server reachable
//! over the network needs. Host and Origin are validated against DNS rebinding, bearer tokens
//! (static or JWT, see [`crate::serve_auth`]) are required when configured, request bodies are
//! capped, and `/healthz` answers probes. The token stays here: nothing of the client's request
//! is passed to upstream servers; only the [`Principal`] it stands for travels with the request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::sealed_sessions::{SESSION_HEADER, SealedSessions};
use crate::serve::{McpService, ServedService};
use crate::serve_auth::{Authenticator, JwtSettings, Principal, Refusal, StaticToken};

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
        }
    }
}

/// Serves `factory`'s services (one per 2025-11-25 session or per stateless request) on
/// `listener` until `shutdown` is cancelled.
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
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.push(local.ip().to_string());
    hosts.extend(options.allowed_hosts.iter().cloned());
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(options.allowed_origins.clone())
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(shutdown.child_token())
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    if options.allowed_origins.is_empty() {
        config = config.enforce_origin_validation();
    }
    let sessions = Arc::new(SealedSessions::new(options.session_key.as_deref())?);
    config.session_store = Some(sessions.clone());
    let manager = Arc::new(LocalSessionManager::default());
    let mcp = StreamableHttpService::new(
        move || Ok(ServedService::new(factory())),
        manager.clone(),
        config,
    );
    let edge = Arc::new(Edge {
        authenticator: Authenticator::new(options.tokens, options.jwt),
        sessions,
        manager,
    });
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection");
                    continue;
                }
            },
        };
        let mcp = mcp.clone();
        let edge = edge.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let mut mcp = mcp.clone();
                let edge = edge.clone();
                async move { Ok::<_, Infallible>(route(request, &mut mcp, &edge, peer).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%error, %peer, "HTTP connection ended");
                    }
                }
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// What the HTTP edge checks and translates before rmcp sees a request.
struct Edge {
    authenticator: Authenticator,
    sessions: Arc<SealedSessions>,
    manager: Arc<LocalSessionManager>,
}

impl Edge {
    /// A sealed session id this replica holds becomes rmcp's own id for it; any other id
    /// passes unchanged (rmcp restores a sealed one it does not hold, and refuses the rest).
    async fn open_session_id(&self, request: &mut Request<Incoming>) {
        let Some(sealed) = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        let Some((local, _)) = self.sessions.open(sealed) else {
            return;
        };
        if matches!(
            self.manager.has_session(&local.as_str().into()).await,
            Ok(true)
        ) && let Ok(value) = hyper::header::HeaderValue::from_str(&local)
        {
            request.headers_mut().insert(SESSION_HEADER, value);
        }
    }

    /// rmcp's id of a session it just created becomes the sealed id the client keeps.
    fn seal_session_id(&self, response: &mut Response<Body>) {
        let Some(local) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        if let Some(sealed) = self.sessions.take_fresh(local)
            && let Ok(value) = hyper::header::HeaderValue::from_str(&sealed)
        {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
    }
}

async fn route<M>(
    mut request: Request<Incoming>,
    mcp: &mut M,
    edge: &Edge,
    peer: SocketAddr,
) -> Response<Body>
where
    M: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    match request.uri().path() {
        "/healthz" => plain(StatusCode::OK, "ok"),
        MCP_PATH => {
            let authenticator = &edge.authenticator;
            if authenticator.required() {
                let header = request
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                match authenticator.authenticate(header).await {
                    Ok(principal) => {
                        request.extensions_mut().insert::<Principal>(principal);
                    }
                    Err(refusal) => {
                        tracing::info!(%peer, "refused a request: {refusal}");
                        return refused(&refusal);
                    }
                }
            }
            edge.open_session_id(&mut request).await;
            let mut response = match mcp.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            edge.seal_session_id(&mut response);
            response
        }
        other => plain(
            StatusCode::NOT_FOUND,
            &format!("no such path \"{other}\"; the MCP endpoint is {MCP_PATH}"),
        ),
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *response.status_mut() = status;
    response
}

/// A JSON-RPC error body with 401 (and `WWW-Authenticate`, RFC 6750) or 503.
fn refused(refusal: &Refusal) -> Response<Body> {
    let (status, message) = match refusal {
        Refusal::Unauthorized(why) => (StatusCode::UNAUTHORIZED, format!("unauthorized: {why}")),
        Refusal::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, why.clone()),
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32001, "message": message},
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        // Quotes would end the parameter early; the JSON body carries the full text.
        let description = refusal.to_string().replace(['"', '\\'], "'");
        let challenge =
            format!("Bearer error=\"invalid_token\", error_description=\"{description}\"");
        if let Ok(value) = hyper::header::HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(hyper::header::WWW_AUTHENTICATE, value);
        }
    }
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
