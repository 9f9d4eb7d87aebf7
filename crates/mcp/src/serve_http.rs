//! Streamable HTTP for any [`McpService`]: rmcp's server transport (both protocol eras:
//! 2025-11-25 sessions, 2026-07-28 stateless requests) behind the checks a server reachable
//! over the network needs. Host and Origin are validated against DNS rebinding, bearer tokens
//! are required when configured, request bodies are capped, and `/healthz` answers probes.
//! The token stays here: nothing of the client's request is passed to upstream servers.

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
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::serve::{McpService, ServedService};

/// The path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// How the HTTP endpoint admits requests.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Bearer tokens that are accepted; empty admits every request (loopback only, which the
    /// front end enforces).
    pub tokens: Vec<String>,
    /// Host names (or `host:port`) accepted in the `Host` header besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`https://app.example.com:443`); a request carrying any other
    /// `Origin` is refused with 403. Requests without `Origin` (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            tokens: Vec::new(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
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
    let mcp = StreamableHttpService::new(
        move || Ok(ServedService::new(factory())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let tokens = Arc::new(options.tokens);
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
        let tokens = tokens.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let mut mcp = mcp.clone();
                let tokens = tokens.clone();
                async move { Ok::<_, Infallible>(route(request, &mut mcp, &tokens, peer).await) }
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

async fn route<M>(
    request: Request<Incoming>,
    mcp: &mut M,
    tokens: &[String],
    peer: SocketAddr,
) -> Response<Body>
where
    M: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    match request.uri().path() {
        "/healthz" => plain(StatusCode::OK, "ok"),
        MCP_PATH => {
            if !tokens.is_empty() && !authorized(&request, tokens) {
                tracing::info!(%peer, "refused a request without a valid bearer token");
                return unauthorized();
            }
            match mcp.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
        other => plain(
            StatusCode::NOT_FOUND,
            &format!("no such path \"{other}\"; the MCP endpoint is {MCP_PATH}"),
        ),
    }
}

/// Whether the request carries one of `tokens` as its bearer token. Compared in constant
/// time per token so response timing does not reveal a prefix.
fn authorized(request: &Request<Incoming>, tokens: &[String]) -> bool {
    let Some(given) = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    tokens.iter().fold(false, |found, token| {
        found | same(token.as_bytes(), given.as_bytes())
    })
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *response.status_mut() = status;
    response
}

fn unauthorized() -> Response<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32001, "message": "unauthorized: send \"Authorization: Bearer TOKEN\" with a token the gateway accepts"},
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn token_comparison() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
