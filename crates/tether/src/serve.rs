//! `tether serve`: the configured servers as one MCP server (the gateway in `tether-gateway`),
//! on stdio for a desktop host's config or on Streamable HTTP. This module only reads flags and
//! config, starts the gateway, and reports what failed on stderr: stdout belongs to the protocol.

use std::net::SocketAddr;
use std::path::PathBuf;

use tether_catalog::SelectionMode;
use tether_gateway::{Gateway, GatewayOptions};
use tether_mcp::ServerConfig;
use tether_serve::{HttpOptions, JwtSettings, MCP_PATH, ServeMetrics, StaticToken};
use tokio_util::sync::CancellationToken;

use tether_agent::Settings;

use crate::Failure;
use crate::models::ToolsArg;

/// `tether serve` options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve Streamable HTTP on this address (both protocol eras) instead of stdio,
    /// e.g. 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Keep the upstream server's own tool and prompt names (needs exactly one server).
    #[arg(long)]
    pub no_prefix: bool,
    /// What `tools/list` offers: every tool, a search tool, or one mcp_query tool
    /// [default: "toolSelection" from the config, else all].
    #[arg(long, value_enum, value_name = "MODE")]
    pub tools: Option<ToolsArg>,
    /// With --http: a file of accepted bearer tokens, one per line, each optionally followed
    /// by the tools it may use (`TOKEN time__* everything__get-sum`; `#` starts a comment).
    /// TETHER_SERVE_TOKENS (comma-separated, same form) adds more. A non-loopback address
    /// needs tokens or --jwks-url.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// With --http: also accept JWTs signed by a key from this JWKS URL (https, or http on
    /// loopback); needs --jwt-issuer and --jwt-audience.
    #[arg(
        long,
        value_name = "URL",
        env = "TETHER_SERVE_JWKS_URL",
        requires_all = ["http", "jwt_issuer", "jwt_audience"]
    )]
    pub jwks_url: Option<String>,
    /// The `iss` a JWT must carry.
    #[arg(long, value_name = "ISSUER", env = "TETHER_SERVE_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// A value the JWT's `aud` must include.
    #[arg(long, value_name = "AUDIENCE", env = "TETHER_SERVE_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// The JWT claim listing the tools a token may use (globs, as an array or space-separated);
    /// a token without it may use every tool.
    #[arg(long, value_name = "CLAIM", default_value = "tether_tools")]
    pub jwt_tools_claim: String,
    /// With --http: a file holding the secret every replica shares (at least 16 characters),
    /// so that any replica behind a load balancer can serve any 2025-11-25 session; the
    /// TETHER_SESSION_KEY variable does the same. Without it, a session lives on the replica
    /// that made it.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub session_key_file: Option<PathBuf>,
    /// With --http: requests one client (a token, else an address) may have in flight;
    /// more are refused with 429.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "http")]
    pub max_in_flight: usize,
    /// With --http: 2025-11-25 sessions open at once, all clients together; more are refused
    /// with 503.
    #[arg(long, value_name = "N", default_value_t = 10_000, requires = "http")]
    pub max_sessions: usize,
    /// With --http: 2025-11-25 sessions one client (a token, else an address) may have open;
    /// more are refused with 429.
    #[arg(long, value_name = "N", default_value_t = 1_000, requires = "http")]
    pub max_sessions_per_client: usize,
    /// With --http: seconds a 2025-11-25 session may go unused before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 300, requires = "http")]
    pub session_idle_timeout: u64,
    /// With --http: connections open at once; at the cap a new one closes the longest-idle
    /// one (default: what `ulimit -n` allows, less 128, at most 10,000).
    #[arg(long, value_name = "N", requires = "http")]
    pub max_connections: Option<usize>,
    /// With --http: seconds an answer may wait on a client that reads none of it before the
    /// connection is closed and the answer dropped.
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "http")]
    pub write_stall_timeout: u64,
    /// With --http: seconds that requests in flight may take to finish after SIGTERM.
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "http")]
    pub drain_timeout: u64,
    /// With --http: a browser origin allowed to call (e.g. https://app.example.com:443);
    /// repeatable. Requests from any other Origin are refused.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allow_origin: Vec<String>,
    /// With --http: a host name clients use to reach the gateway (the Host header), besides
    /// localhost and the bound address; repeatable.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub allow_host: Vec<String>,
}

/// Runs the gateway until the client (stdio) goes away.
pub async fn serve(
    servers: Vec<ServerConfig>,
    settings: &Settings,
    args: ServeArgs,
) -> Result<(), Failure> {
    let mode = match args.tools {
        Some(ToolsArg::Search) => SelectionMode::Search,
        Some(ToolsArg::Meta) => SelectionMode::Meta,
        Some(ToolsArg::All | ToolsArg::Auto) => SelectionMode::All,
        None => settings.tool_selection.unwrap_or(SelectionMode::All),
    };
    let http = match args.http {
        Some(addr) => Some((addr, http_options(addr, &args)?)),
        None => None,
    };
    let metrics = http
        .as_ref()
        .map_or_else(ServeMetrics::new, |(_, options)| options.metrics.clone());
    let options = GatewayOptions {
        mode,
        prefix: !args.no_prefix,
        rules: settings.approval.clone(),
        pins: crate::session::pins_path(),
        metrics,
    };
    let traces = crate::telemetry::install();
    let (gateway, failures) = Gateway::start(servers, options)
        .await
        .map_err(|e| Failure::usage(e.to_string()))?;
    for failure in failures {
        safe_eprintln!("tether serve: {failure}");
    }
    let outcome = match http {
        None => tether_serve::serve_stdio(gateway.session())
            .await
            .map_err(Failure::partial),
        Some((addr, mut options)) => {
            options.readiness = Some(gateway.clone());
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| Failure::usage(format!("--http {addr}: cannot listen: {e}")))?;
            let bound = listener.local_addr().unwrap_or(addr);
            safe_eprintln!("tether serve: listening on http://{bound}{MCP_PATH}");
            let shutdown = CancellationToken::new();
            tokio::spawn(stop_on_signal(shutdown.clone()));
            let sessions = gateway.clone();
            tether_serve::serve_http(listener, move || sessions.session(), options, shutdown)
                .await
                .map_err(Failure::partial)
        }
    };
    gateway.shutdown().await;
    if let Some(provider) = traces {
        // Sends what is still batched; the SDK waits on its own thread, so not on ours.
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
    outcome
}

/// Tokens, hosts and origins for `--http`; a non-loopback address without tokens is refused.
fn http_options(addr: SocketAddr, args: &ServeArgs) -> Result<HttpOptions, Failure> {
    let mut tokens = Vec::new();
    if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::usage(format!("--token-file {}: cannot read: {e}", path.display()))
        })?;
        for (n, line) in text.lines().enumerate() {
            let token = StaticToken::parse_line(line).map_err(|why| {
                Failure::usage(format!("--token-file {}:{}: {why}", path.display(), n + 1))
            })?;
            tokens.extend(token);
        }
    }
    if let Ok(list) = std::env::var("TETHER_SERVE_TOKENS") {
        for (n, item) in list.split(',').enumerate() {
            let token = StaticToken::parse_line(item).map_err(|why| {
                Failure::usage(format!("TETHER_SERVE_TOKENS, token {}: {why}", n + 1))
            })?;
            tokens.extend(token);
        }
    }
    let jwt = match (&args.jwks_url, &args.jwt_issuer, &args.jwt_audience) {
        (Some(url), Some(issuer), Some(audience)) => {
            let settings = JwtSettings {
                jwks_url: url.clone(),
                issuer: issuer.clone(),
                audience: audience.clone(),
                tools_claim: args.jwt_tools_claim.clone(),
            };
            settings.check().map_err(Failure::usage)?;
            Some(settings)
        }
        _ => None,
    };
    if !addr.ip().is_loopback() && tokens.is_empty() && jwt.is_none() {
        return Err(Failure::usage(format!(
            "--http {addr}: a gateway reachable from other machines needs authentication; pass --token-file FILE, set TETHER_SERVE_TOKENS or --jwks-url (or bind 127.0.0.1)"
        )));
    }
    let session_key = match &args.session_key_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| {
                    Failure::usage(format!(
                        "--session-key-file {}: cannot read: {e}",
                        path.display()
                    ))
                })?
                .trim()
                .to_string(),
        ),
        None => std::env::var("TETHER_SESSION_KEY").ok(),
    };
    if let Some(key) = &session_key
        && key.len() < tether_serve::sealed_sessions::MIN_SECRET_LEN
    {
        return Err(Failure::usage(format!(
            "the session key (--session-key-file or TETHER_SESSION_KEY) must be at least {} characters; make one with `openssl rand -base64 32`",
            tether_serve::sealed_sessions::MIN_SECRET_LEN
        )));
    }
    Ok(HttpOptions {
        tokens,
        jwt,
        session_key,
        max_in_flight_per_client: args.max_in_flight,
        max_sessions: args.max_sessions.max(1),
        max_sessions_per_client: args.max_sessions_per_client.max(1),
        session_idle: std::time::Duration::from_secs(args.session_idle_timeout.max(1)),
        drain_timeout: std::time::Duration::from_secs(args.drain_timeout),
        // 0 asks for the default; an explicit cap is at least 1.
        max_connections: args.max_connections.map_or(0, |n| n.max(1)),
        write_stall_timeout: std::time::Duration::from_secs(args.write_stall_timeout.max(1)),
        allowed_hosts: args.allow_host.clone(),
        allowed_origins: args.allow_origin.clone(),
        ..HttpOptions::default()
    })
}

/// Cancels `shutdown` on Ctrl-C or SIGTERM, so sessions end and servers are stopped.
async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            shutdown.cancel();
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    shutdown.cancel();
}
