//! The gateway's side of the hot path ([`tether_serve::direct_calls`]): a plain call of a tool
//! the client may see, that no rule asks about and no pin blocks, on a stdio server whose
//! answer cannot need the client, goes up and comes back undecoded. Everything else answers
//! [`DirectAnswer::FullPath`] and takes [`GatewaySession::call_tool`]'s way, so both paths
//! apply the same policy (docs/decisions.md, "The gateway's hot path").

use serde_json::Value;
use tether_catalog::policy::{ApprovalMode, Decision, Hints, decide};
use tether_catalog::selection::SelectionMode;
use tether_mcp::{DirectReply, McpError};
use tether_protocol::{MCP_APPS_EXTENSION, ProtocolEra, ToolAnnotations};
use tether_serve::{CallOutcome, DirectAnswer, DirectCall, ServeError};

use crate::{GatewaySession, InFlightGuard, error_result, passed_on};

impl GatewaySession {
    /// See [`tether_serve::McpService::direct_call`].
    pub(crate) async fn direct(&self, call: DirectCall<'_>) -> DirectAnswer {
        let gateway = &self.gateway;
        // Spans are made on the full path; with traces off they cost nothing there either.
        if gateway.traced || self.selection.mode() != SelectionMode::All {
            return DirectAnswer::FullPath;
        }
        let capabilities = call.client_capabilities;
        let declared =
            |capability: &str| capabilities.get(capability).is_some_and(|c| !c.is_null());
        let runs_apps = || {
            capabilities
                .get("extensions")
                .and_then(|e| e.get(MCP_APPS_EXTENSION))
                .is_some_and(|e| !e.is_null())
        };
        let snapshot = self.snapshot_view(call.principal, runs_apps);
        let tool = if gateway.options.prefix {
            snapshot.resolve(call.name)
        } else {
            snapshot.tools().iter().find(|t| t.tool.name == call.name)
        };
        let Some(tool) = tool else {
            return DirectAnswer::FullPath;
        };
        if tool.tool.requires_task() {
            return DirectAnswer::FullPath;
        }
        let Ok(connection) = gateway.connection(&tool.server) else {
            return DirectAnswer::FullPath;
        };
        // A legacy server may ask its client mid-call; only the full path knows this client's
        // call well enough to relay the question to it (to a 2026-07-28 client, by holding the
        // call across its input rounds). A modern server asks in its result instead, which
        // sends the call the full way.
        let may_ask = call.modern.is_some() || declared("sampling") || declared("elicitation");
        if !connection.takes_direct_calls(&tool.tool.name)
            || (may_ask && connection.summary().era != ProtocolEra::Modern)
        {
            return DirectAnswer::FullPath;
        }
        // Headers a 2026-07-28 client must send for marked parameters are checked there too.
        if call.modern.is_some() && marks_header_parameters(&tool.tool.input_schema) {
            return DirectAnswer::FullPath;
        }
        let allowed = decide(
            ApprovalMode::Auto,
            &gateway.options.rules,
            &tool.qualified_name,
            Hints {
                annotations: &ToolAnnotations::default(),
                trusted: false,
            },
            true,
        );
        if !matches!(allowed, Decision::Allow)
            || gateway.catalog.pin_change(&tool.qualified_name).is_some()
        {
            return DirectAnswer::FullPath;
        }
        let level = match &call.modern {
            Some(modern) => modern.log_level.map(str::to_string),
            None => self.log_level.lock().ok().and_then(|level| level.clone()),
        };
        let capabilities = call.modern.as_ref().map(|m| m.client_capabilities);
        let started = std::time::Instant::now();
        let id = gateway
            .next_call
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Held as a call nobody can be asked about: a question the server asks meanwhile is
        // not sent to another client's call on the same server.
        let _registered = InFlightGuard::register(&gateway.in_flight, &tool.server, id, None);
        let reply = connection
            .call_direct(
                &tool.tool.name,
                call.arguments,
                level.as_deref(),
                capabilities,
                call.progress,
            )
            .await;
        let (answer, outcome) = match reply {
            Ok(DirectReply::Result(result)) => (DirectAnswer::Result(result), CallOutcome::Ok),
            Ok(DirectReply::FullPath) => return DirectAnswer::FullPath,
            Err(McpError::UnknownItem { .. }) => (
                DirectAnswer::Error(ServeError::NotFound {
                    what: "tool",
                    name: call.name.to_string(),
                }),
                CallOutcome::Error,
            ),
            Err(error @ McpError::Rpc { .. }) => {
                (DirectAnswer::Error(passed_on(error)), CallOutcome::Error)
            }
            Err(error) => {
                let result = serde_json::to_string(&error_result(error.to_string()))
                    .ok()
                    .and_then(|text| serde_json::value::RawValue::from_string(text).ok());
                match result {
                    Some(result) => (DirectAnswer::Result(result), CallOutcome::Error),
                    None => (
                        DirectAnswer::Error(ServeError::Internal(error.to_string())),
                        CallOutcome::Error,
                    ),
                }
            }
        };
        gateway.options.metrics.tool_call(
            &tool.server,
            &tool.tool.name,
            outcome,
            started.elapsed().as_secs_f64(),
        );
        answer
    }
}

/// Whether `schema` marks any parameter, at any depth, to travel in an `Mcp-Param-*` header.
fn marks_header_parameters(schema: &Value) -> bool {
    match schema {
        Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| key == "x-mcp-header" || marks_header_parameters(value)),
        Value::Array(items) => items.iter().any(marks_header_parameters),
        _ => false,
    }
}
