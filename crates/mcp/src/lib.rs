//! Tether's MCP layer: reads the server configuration, starts and connects servers over stdio
//! or Streamable HTTP in either protocol era, and exposes their tools, resources and prompts as
//! `tether-protocol` types. The client side of MCP; `tether-serve` is the server side, and
//! these two are the only crates that know rmcp.

pub mod auth;
pub mod client;
pub mod config;
pub mod connection;
pub mod direct_lane;
pub mod error;
pub mod http_client;
pub mod input_rounds;
mod legacy_fields;
pub mod oauth_guard;
pub mod person_wait;
pub mod private_files;
pub mod process_ties;
pub mod registry;
pub mod router;
pub mod sse;
mod stdio;
mod streamable_client;
mod tasks;

pub use client::{
    ElicitationAnswer, ElicitationRequest, HeadlessHost, HostHandler, Progress, Root, ServerNotice,
    TaskState,
};
pub use config::{Config, SamplingPolicy, ServerConfig, Transport};
pub use connection::{Completion, DirectReply, ServerConnection};
pub use error::{ErrorClass, McpError};
pub use registry::{ServerEntry, ServerRegistry, ServerState};
pub use router::ToolRouter;
pub use stdio::kill_all_servers;
