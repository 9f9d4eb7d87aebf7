//! The one place outgoing HTTP is set up: the process-wide rustls crypto provider, and the
//! builder every HTTP client starts from (MCP servers, OAuth, legacy SSE, a gateway's JWKS,
//! the binary's OTLP exporter), so no client is built before TLS can work.

/// rustls needs one process-wide crypto provider; this installs ring (idempotent).
pub fn install_tls_provider() {
    // Fails only when a provider is already installed, which is what we want anyway.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client builder with TLS ready.
pub fn builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder()
}
