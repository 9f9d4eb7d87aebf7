//! The host's side of the conversation that servers start: requests a server makes of us
//! (sampling, elicitation, roots) and notifications it sends (progress, logging, list
//! changes, resource updates). rmcp calls [`ClientSession`] for each; it answers by asking
//! the front end's [`HostHandler`], so the binary decides about consent and display while
//! this crate keeps the protocol.
//!
//! Sampling, roots and logging are deprecated in 2026-07-28 but still live on legacy servers
//! (and inside MRTR rounds), so this module deliberately uses rmcp's deprecated items.
#![allow(deprecated)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rmcp::model::{
    ClientCapabilities, ClientInfo, ClientJsonRpcMessage, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorData, Implementation,
    JsonRpcMessage, ListRootsResult, ProgressNotificationParam, ProtocolVersion,
    ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::RequestContext;
use rmcp::transport::Transport;
use rmcp::{ClientHandler, RoleClient};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedSender;

/// A directory the host tells servers they may work in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// A short label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Root {
    /// The working directory as the only root (the default), or none if it is unreadable.
    pub fn working_directory() -> Vec<Root> {
        std::env::current_dir()
            .map(|dir| vec![Root::directory(&dir)])
            .unwrap_or_default()
    }

    /// The root for a local directory.
    pub fn directory(path: &Path) -> Root {
        Root {
            uri: format!("file://{}", path.display()),
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()),
        }
    }
}

/// What a server asks the user to provide.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationRequest {
    /// Fill in a form described by a flat JSON Schema of primitive properties.
    Form {
        /// Why the server asks.
        message: String,
        /// The requested schema (`{"type":"object","properties":{…},"required":[…]}`).
        schema: Value,
    },
    /// Visit a URL (for example to sign in) outside the conversation.
    Url {
        /// Why the server asks.
        message: String,
        /// Where to go; never opened without the user's consent.
        url: String,
        /// The server's id for this request.
        elicitation_id: String,
    },
}

/// The user's answer to an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationAnswer {
    /// Submitted, with the form's values (empty for URL mode).
    Accept(Map<String, Value>),
    /// Explicitly refused.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// A notification from a server that the front end may show.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerNotice {
    /// `notifications/message`.
    Log {
        /// `debug` … `emergency`.
        level: String,
        /// The server's logger name.
        logger: Option<String>,
        /// The payload (often a string).
        data: Value,
    },
    /// Its tools, resources or prompts changed; the catalogue is refreshed on next use.
    ListChanged {
        /// `tools`, `resources` or `prompts`.
        what: &'static str,
    },
    /// A subscribed resource changed.
    ResourceUpdated {
        /// Its URI.
        uri: String,
    },
    /// The server went away (its process exited, its connection closed) and was started
    /// again.
    Restarted {
        /// How many times this server has been restarted in this run.
        restarts: u32,
        /// Why the previous session ended.
        reason: String,
    },
    /// The server finished starting after the host had gone on without it (see
    /// `ServerRegistry::start_settling`): its tools are offered from the next model request.
    JoinedLate {
        /// How long its start took.
        elapsed: std::time::Duration,
        /// Why it could not be started, when it could not.
        error: Option<String>,
    },
}

/// One `notifications/progress` for a call in flight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    /// Progress so far (increases).
    pub progress: f64,
    /// The total, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What the server is doing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a call the server runs as a task: the task and its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskState>,
}

/// Where a task-augmented call stands (MCP 2025-11-25 tasks): the server's task id and its
/// status (`working`, `input_required`, `completed`, `failed`, `cancelled`).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    /// The id the server gave the task.
    pub task_id: String,
    /// Its status as the server last reported it.
    pub status: String,
}

/// What the front end provides to servers: consent, answers and display.
pub trait HostHandler: Send + Sync + 'static {
    /// The roots offered to servers.
    fn roots(&self) -> Vec<Root>;
    /// Answers `sampling/createMessage` (params and result in MCP's wire shape) or says why
    /// not; the implementation asks for consent first.
    fn sample<'a>(&'a self, server: &'a str, params: Value)
    -> BoxFuture<'a, Result<Value, String>>;
    /// Answers an elicitation.
    fn elicit<'a>(
        &'a self,
        server: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer>;
    /// Shows or records a notification.
    fn notify(&self, server: &str, notice: ServerNotice);
    /// The least severe log level the user wants from servers (`debug` … `emergency`),
    /// asked of legacy servers with `logging/setLevel`; `None` leaves their default.
    fn log_level(&self) -> Option<String> {
        None
    }
}

/// The host of non-interactive uses (the gateway, scripts): no roots (offered only when a user
/// asks), sampling is refused, elicitations are declined, logs go to `tracing`.
#[derive(Debug, Default)]
pub struct HeadlessHost;

impl HostHandler for HeadlessHost {
    fn roots(&self) -> Vec<Root> {
        Vec::new()
    }

    fn sample<'a>(
        &'a self,
        server: &'a str,
        _params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            Err(format!(
                "server \"{server}\" asked for sampling, which needs a model and the user's consent; use `tether run` or `tether chat`"
            ))
        })
    }

    fn elicit<'a>(
        &'a self,
        _server: &'a str,
        _request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async { ElicitationAnswer::Decline })
    }

    fn notify(&self, server: &str, notice: ServerNotice) {
        tracing::info!(server, ?notice, "server notification");
    }
}

/// Where progress notifications of calls in flight go, by progress token.
pub(crate) type ProgressRoutes = Arc<Mutex<HashMap<String, ProgressRoute>>>;

/// One call's progress listener and the furthest progress it was sent.
pub(crate) struct ProgressRoute {
    pub(crate) sender: UnboundedSender<Progress>,
    pub(crate) last: Option<f64>,
}

/// Catalogue entries a server said changed since they were last listed.
#[derive(Debug)]
pub(crate) struct StaleLists {
    pub(crate) tools: AtomicBool,
    /// Counts the server's `tools/list_changed` notifications; the tap pushes each one here so
    /// a tool catalogue (or the gateway) can wait for changes instead of polling.
    pub(crate) tool_changes: tokio::sync::watch::Sender<u64>,
    /// Subscribed resources the server said changed, not yet taken.
    pub(crate) resources: Mutex<Vec<String>>,
}

impl Default for StaleLists {
    fn default() -> Self {
        StaleLists {
            tools: AtomicBool::new(false),
            tool_changes: tokio::sync::watch::Sender::new(0),
            resources: Mutex::new(Vec::new()),
        }
    }
}

/// Sees every message a server sends, in order, before rmcp dispatches it. Notifications
/// are acted on here rather than in rmcp's handler callbacks because rmcp runs each of those
/// in its own task: a `tools/list_changed` or a progress sent just before a result could
/// then be handled after the caller already moved on.
#[derive(Clone)]
pub(crate) struct NotificationTap {
    pub(crate) server: String,
    pub(crate) host: Arc<dyn HostHandler>,
    pub(crate) progress: ProgressRoutes,
    pub(crate) stale: Arc<StaleLists>,
}

impl NotificationTap {
    fn observe(&self, message: &ServerJsonRpcMessage) {
        let JsonRpcMessage::Notification(notification) = message else {
            return;
        };
        match &notification.notification {
            ServerNotification::ProgressNotification(n) => self.progress(&n.params),
            ServerNotification::LoggingMessageNotification(n) => {
                let level = serde_json::to_value(n.params.level)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| "info".into());
                self.host.notify(
                    &self.server,
                    ServerNotice::Log {
                        level,
                        logger: n.params.logger.clone(),
                        data: n.params.data.clone(),
                    },
                );
            }
            ServerNotification::ToolListChangedNotification(_) => {
                self.stale.tools.store(true, Ordering::SeqCst);
                self.stale.tool_changes.send_modify(|n| *n += 1);
                self.host
                    .notify(&self.server, ServerNotice::ListChanged { what: "tools" });
            }
            ServerNotification::ResourceListChangedNotification(_) => {
                self.host.notify(
                    &self.server,
                    ServerNotice::ListChanged { what: "resources" },
                );
            }
            ServerNotification::PromptListChangedNotification(_) => {
                self.host
                    .notify(&self.server, ServerNotice::ListChanged { what: "prompts" });
            }
            ServerNotification::ResourceUpdatedNotification(n) => {
                if let Ok(mut uris) = self.stale.resources.lock()
                    && !uris.contains(&n.params.uri)
                {
                    uris.push(n.params.uri.clone());
                }
                self.host.notify(
                    &self.server,
                    ServerNotice::ResourceUpdated {
                        uri: n.params.uri.clone(),
                    },
                );
            }
            _ => {}
        }
    }

    fn progress(&self, params: &ProgressNotificationParam) {
        // Progress only ever increases; anything not ahead of the last one is stale.
        let key = token_key(&params.progress_token);
        let Ok(mut routes) = self.progress.lock() else {
            return;
        };
        if let Some(route) = routes.get_mut(&key)
            && route.last.is_none_or(|last| params.progress > last)
        {
            route.last = Some(params.progress);
            let _ = route.sender.send(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message.clone(),
                task: None,
            });
        }
    }
}

/// A transport with a [`NotificationTap`] on its incoming side.
pub(crate) struct Tapped<T> {
    pub(crate) inner: T,
    pub(crate) tap: NotificationTap,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let message = self.inner.receive().await?;
        self.tap.observe(&message);
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// rmcp's handler for one connection: declares our capabilities and answers the server's
/// requests by asking the host.
#[derive(Clone)]
pub(crate) struct ClientSession {
    pub(crate) server: String,
    pub(crate) host: Arc<dyn HostHandler>,
    /// Sent in `initialize`.
    pub(crate) protocol_version: ProtocolVersion,
}

/// What we tell servers we can do.
fn capabilities() -> ClientCapabilities {
    // A literal that matches rmcp's schema; should a future rmcp reject it, connecting with
    // no client capabilities still works (servers then just don't ask).
    serde_json::from_value(json!({
        "roots": {"listChanged": true},
        "sampling": {"tools": {}},
        "elicitation": {"form": {}, "url": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }))
    .unwrap_or_default()
}

/// The progress token as a map key, whether the server sent a number or a string.
pub(crate) fn token_key(token: &impl Serialize) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

impl ClientHandler for ClientSession {
    fn get_info(&self) -> ClientInfo {
        ClientInfo::new(
            capabilities(),
            Implementation::new("tether", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(self.protocol_version.clone())
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let roots = json!({"roots": self.host.roots()});
        serde_json::from_value(roots).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let params = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match self.host.sample(&self.server, params).await {
            Ok(result) => serde_json::from_value(result).map_err(|e| {
                ErrorData::internal_error(format!("sampling answer is malformed: {e}"), None)
            }),
            // -1 is what the spec's examples use for "user rejected sampling request".
            Err(reason) => Err(ErrorData::new(rmcp::model::ErrorCode(-1), reason, None)),
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let wire = serde_json::to_value(&request).unwrap_or_default();
        let answer = elicitation_answer(self.host.as_ref(), &self.server, &wire).await;
        serde_json::from_value(answer).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// Each property's `default` in a form's schema: what a person pressing Enter through the
/// form would send.
pub fn form_defaults(schema: &Value) -> Map<String, Value> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter_map(|(name, p)| Some((name.clone(), p.get("default")?.clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// Asks `host` an elicitation of `server` (its params in the wire shape) and returns the
/// answer in the wire shape of `ElicitResult`.
pub(crate) async fn elicitation_answer(
    host: &dyn HostHandler,
    server: &str,
    wire: &Value,
) -> Value {
    let text = |key: &str| {
        wire.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let request = match wire.get("mode").and_then(Value::as_str) {
        Some("url") => ElicitationRequest::Url {
            message: text("message"),
            url: text("url"),
            elicitation_id: text("elicitationId"),
        },
        _ => ElicitationRequest::Form {
            message: text("message"),
            schema: wire.get("requestedSchema").cloned().unwrap_or_default(),
        },
    };
    match host.elicit(server, request).await {
        ElicitationAnswer::Accept(content) if content.is_empty() => json!({"action": "accept"}),
        ElicitationAnswer::Accept(content) => json!({"action": "accept", "content": content}),
        ElicitationAnswer::Decline => json!({"action": "decline"}),
        ElicitationAnswer::Cancel => json!({"action": "cancel"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_parse_into_rmcp_types() {
        let caps = serde_json::to_value(capabilities()).unwrap();
        assert_eq!(caps["roots"]["listChanged"], json!(true));
        assert!(caps["sampling"].is_object());
        assert!(caps["elicitation"]["form"].is_object());
        assert!(caps["elicitation"]["url"].is_object());
    }

    #[test]
    fn directory_roots_are_file_uris() {
        let root = Root::directory(Path::new("/tmp/project"));
        assert_eq!(root.uri, "file:///tmp/project");
        assert_eq!(root.name.as_deref(), Some("project"));
    }
}
