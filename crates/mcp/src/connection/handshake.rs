//! Opening a session with a server: the Streamable HTTP client and its handshake, the legacy
//! era's retry, a saved sign-in, and the session itself, in whichever era the server speaks.

#![allow(deprecated)]

use super::*;

/// One Streamable HTTP handshake over `client` (plain, or signing requests in), its SSE data
/// read through the task-field rewrite as every reader does, its GET stream reported to
/// `standalone`.
pub(super) async fn serve_streamable<C>(
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
pub(super) const STANDALONE_STREAM_WAIT: Duration = Duration::from_secs(2);

/// How long an idle connection to a server stays open for the next request.
pub(super) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// The HTTP client of a Streamable HTTP connection: only same-origin 307/308 redirects, at
/// most 10 (as rmcp's default client), and, unlike rmcp's default, connections kept alive
/// between requests. rmcp turns pooling off because a connection whose SSE answer was left
/// unread stalled ~40 ms on delayed ACKs when reused; rmcp now reads each answer's stream to
/// its end, and a new TCP connection per request cost 300 µs of a 500 µs proxied call on
/// loopback (docs/decisions.md, "Keep-alive in Tether's HTTP client"). Idle connections close
/// after 4 s, before the 5 s keep-alive timeout of Node's and uvicorn's servers, so a request
/// never races a server closing the connection it was written to.
pub(super) fn http_client() -> reqwest::Client {
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
pub(super) fn legacy_lifecycle() -> ClientLifecycleMode {
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
pub(super) fn legacy_retry(
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
pub(super) fn handshake_refusal(error: &rmcp::service::ClientInitializeError) -> Option<String> {
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
pub(super) async fn saved_sign_in(config: &ServerConfig) -> Option<crate::auth::Authorization> {
    match (&config.transport, crate::auth::credentials_path()) {
        (Transport::Http { url, .. }, Some(path)) => {
            crate::auth::saved_authorization(&config.name, url, &path, config.oauth.guard()).await
        }
        _ => None,
    }
}

/// Starts (stdio) or reaches (HTTP) the server and completes the handshake within its startup
/// timeout: one [`Session`], with what the server said about itself.
pub(super) async fn open_session(
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

/// Connects over the legacy HTTP+SSE transport; that era always starts with `initialize`.
pub(super) async fn serve_sse(
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

/// Why nothing answers at `url`, in words, when a plain TCP connection says so (refused,
/// unknown host, timed out); `None` when the address takes connections (the problem is
/// higher up, and the transport's error says what).
pub(super) async fn unreachable_reason(url: &str) -> Option<String> {
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

pub(super) fn summarize(client: &RunningService<RoleClient, ClientSession>) -> ServerSummary {
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
