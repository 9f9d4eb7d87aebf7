//! `tether serve`: the configured servers as one MCP server (the gateway in `tether-gateway`),
//! on stdio for a desktop host's config or on Streamable HTTP. This module only reads flags and
//! config, starts the gateway, and reports what failed on stderr: stdout belongs to the protocol.

use std::net::SocketAddr;

use serde_json::{Map, Value};
use tether_catalog::SelectionMode;
use tether_gateway::{Gateway, GatewayOptions};
use tether_mcp::ServerConfig;

use crate::Failure;
use crate::run::{ToolsArg, approval_rules};

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
}

/// Runs the gateway until the client (stdio) goes away.
pub async fn serve(
    servers: Vec<ServerConfig>,
    settings: &Map<String, Value>,
    args: ServeArgs,
) -> Result<(), Failure> {
    let mode = match (
        args.tools,
        settings.get("toolSelection").and_then(Value::as_str),
    ) {
        (Some(ToolsArg::Search), _) => SelectionMode::Search,
        (Some(ToolsArg::Meta), _) => SelectionMode::Meta,
        (Some(ToolsArg::All | ToolsArg::Auto), _) => SelectionMode::All,
        (None, Some(text)) => SelectionMode::parse(text)
            .map_err(|e| Failure::usage(format!("config: \"toolSelection\": {e}")))?,
        (None, None) => SelectionMode::All,
    };
    let options = GatewayOptions {
        mode,
        prefix: !args.no_prefix,
        rules: approval_rules(settings)?,
    };
    let (gateway, failures) = Gateway::start(servers, options)
        .await
        .map_err(|e| Failure::usage(e.to_string()))?;
    for failure in failures {
        eprintln!("tether serve: {failure}");
    }
    let outcome = match args.http {
        None => tether_mcp::serve_stdio(gateway.session())
            .await
            .map_err(Failure::partial),
        Some(addr) => Err(Failure::usage(format!(
            "--http {addr}: not available in this build"
        ))),
    };
    gateway.shutdown().await;
    outcome
}
