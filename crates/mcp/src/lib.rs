//! Tether's MCP layer: reads the server configuration, starts and connects servers over stdio
//! or Streamable HTTP in either protocol era, and exposes their tools, resources and prompts as
//! `tether-protocol` types. This is the only crate that knows rmcp.

pub mod auth;
pub mod builtin;
pub mod client;
pub mod config;
pub mod connection;
pub mod error;
pub mod input_rounds;
mod legacy_fields;
pub mod oauth_guard;
pub mod person_wait;
pub mod private_files;
pub mod registry;
pub mod router;
pub mod sealed_sessions;
pub mod serve;
pub mod serve_auth;
pub mod serve_http;
pub mod serve_metrics;
pub mod sse;
mod stdio;
mod tasks;

pub use client::{
    ElicitationAnswer, ElicitationRequest, HeadlessHost, HostHandler, Progress, Root, ServerNotice,
    TaskState,
};
pub use config::{Config, SamplingPolicy, ServerConfig, Transport};
pub use connection::{Completion, ServerConnection};
pub use error::{ErrorClass, McpError};
pub use registry::{ServerEntry, ServerRegistry, ServerState};
pub use router::ToolRouter;
pub use serve::{Caller, McpService, ServeError, ServiceChange, ServiceInfo, serve_stdio};
pub use serve_auth::{JwtSettings, Principal, StaticToken};
pub use serve_http::{HttpOptions, MCP_PATH, serve_http};
pub use serve_metrics::{CallOutcome, Readiness, ServeMetrics};
pub use stdio::kill_all_servers;
