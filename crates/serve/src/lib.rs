//! Tether as an MCP server: the [`McpService`] trait any served service implements (the
//! gateway, the built-in tools server) and its one rmcp adapter, served over stdio or
//! Streamable HTTP in either protocol era, with who may call (`serve_auth`), session ids any
//! replica can restore (`sealed_sessions`), connections capped and watched before any
//! request is read (`connections`), plain calls served past rmcp on a hot path
//! (`direct_calls`) and Prometheus metrics (`serve_metrics`). Beside
//! `tether-mcp` (the client side), the only crate that knows rmcp; it takes only vocabulary
//! from the client side (questions to a client, progress, input rounds).

pub mod builtin;
pub mod connections;
pub mod direct_calls;
mod http_answers;
pub mod sealed_sessions;
pub mod serve;
pub mod serve_auth;
pub mod serve_http;
pub mod serve_metrics;

pub use http_answers::BODY_READ_TIMEOUT;
pub use serve::{
    Caller, DirectAnswer, DirectCall, McpService, ModernRequest, ServeError, ServiceChange,
    ServiceInfo, serve_stdio,
};
pub use serve_auth::{JwtSettings, Principal, StaticToken};
pub use serve_http::{HttpOptions, MCP_PATH, serve_http};
pub use serve_metrics::{CallOutcome, Readiness, ServeMetrics};
