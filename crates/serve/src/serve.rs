//! Tether's server side. [`McpService`] is what a server built on Tether offers — tools,
//! resources, prompts, completion and change notices, in `tether-protocol` types — and
//! [`ServedService`] is the one adapter that puts any of them on the wire through rmcp, over stdio
//! ([`serve_stdio`]) or Streamable HTTP (`crate::http`). The built-in tools server is one
//! implementation and the gateway (`tether serve`) another, so neither touches rmcp and both
//! speak both protocol eras the same way.
#![allow(deprecated)]

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, ErrorData,
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig as ServerInfo, SetLevelRequestParams, SubscriptionFilter,
};
use rmcp::model::{
    CancelTaskParams, CreateTaskResult, GetTaskParams, GetTaskResult, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tether_protocol::ToolResult;
use tether_protocol::{Prompt, PromptResult, Resource, ResourceContents, ResourceTemplate, Tool};
use tokio::sync::broadcast;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use tether_mcp::client::{ElicitationAnswer, ElicitationRequest, Progress};
use tether_mcp::connection::Completion;
use tether_mcp::input_rounds::{Forwarding, InputRequired, InputRound};

use serde_json::value::RawValue;

use crate::serve_auth::Principal;

mod served;

pub use served::{ServedService, serve_stdio};

/// What a served server announces about itself.
#[derive(Debug, Clone, Default)]
pub struct ServiceInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// Guidance for the client's model.
    pub instructions: Option<String>,
    /// It serves resources (and templates).
    pub resources: bool,
    /// It serves prompts.
    pub prompts: bool,
    /// It answers `completion/complete`.
    pub completions: bool,
    /// It forwards log messages.
    pub logging: bool,
    /// Clients may subscribe to resource updates (`resources/subscribe`).
    pub subscribe: bool,
    /// It announces list changes (`listChanged` on each list it serves).
    pub list_changed: bool,
    /// Some of its tools run as tasks for clients that take them (the 2026-07-28 tasks
    /// extension); see [`McpService::runs_as_task`].
    pub tasks: bool,
}

/// Why a served request failed; each maps to one JSON-RPC error code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    /// No such tool, resource or prompt (`-32602`, as the spec asks for unknown names).
    #[error("unknown {what} \"{name}\"")]
    NotFound {
        /// `tool`, `resource` or `prompt`.
        what: &'static str,
        /// What was asked for.
        name: String,
    },
    /// The request's parameters are wrong (`-32602`).
    #[error("{0}")]
    InvalidParams(String),
    /// The request is understood but not allowed (`-32600`, with the reason).
    #[error("{0}")]
    Refused(String),
    /// Something behind the server failed (`-32603`).
    #[error("{0}")]
    Internal(String),
    /// A server behind this one refused the request with this JSON-RPC error, passed on whole
    /// where its code means something to the client (a missing client capability, a resource
    /// that does not exist).
    #[error("{message} (code {code})")]
    Upstream {
        /// The JSON-RPC error code.
        code: i32,
        /// The message.
        message: String,
        /// The error's `data`.
        data: Option<Value>,
    },
    /// An `Mcp-Param-*` header disagrees with the request body (`-32020`, HTTP 400).
    #[error("{0}")]
    HeaderMismatch(String),
    /// Not a failure: the request needs the client's input first (2026-07-28 multi-round
    /// trips). The adapter answers with this input-required result; the client retries.
    #[error("the request needs the client's input")]
    NeedsInput(InputRequired),
}

impl ServeError {
    pub(crate) fn into_error_data(self) -> ErrorData {
        let message = self.to_string();
        match self {
            ServeError::NotFound { .. } | ServeError::InvalidParams(_) => {
                ErrorData::invalid_params(message, None)
            }
            ServeError::Refused(_) => ErrorData::invalid_request(message, None),
            ServeError::Internal(_) => ErrorData::internal_error(message, None),
            ServeError::Upstream {
                code,
                message,
                data,
            } => ErrorData::new(rmcp::model::ErrorCode(code), message, data),
            ServeError::HeaderMismatch(_) => {
                ErrorData::new(rmcp::model::ErrorCode(HEADER_MISMATCH), message, None)
            }
            // Answered as a result before it gets here (`input_required`); a method that
            // cannot return one says so.
            ServeError::NeedsInput(_) => ErrorData::internal_error(
                "an input-required result is not allowed for this request",
                None,
            ),
        }
    }
}

/// JSON-RPC error code of a request whose headers disagree with its body (2026-07-28).
const HEADER_MISMATCH: i32 = -32020;

/// A service's answer as an rmcp response with an input-required arm: `complete` turns the
/// result into rmcp's, and a [`ServeError::NeedsInput`] becomes the input-required result.
fn with_input<T, R>(
    answer: Result<T, ServeError>,
    complete: impl FnOnce(T) -> Result<R, ErrorData>,
    input_required: impl FnOnce(rmcp::model::InputRequiredResult) -> R,
) -> Result<R, ErrorData> {
    match answer {
        Ok(value) => complete(value),
        Err(ServeError::NeedsInput(questions)) => Ok(input_required(wire(questions.result)?)),
        Err(error) => Err(error.into_error_data()),
    }
}

/// A change the served server announces to its clients.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceChange {
    /// The tool list changed.
    Tools,
    /// The resource list changed.
    Resources,
    /// The prompt list changed.
    Prompts,
    /// A resource's contents changed.
    ResourceUpdated(String),
    /// A log message (`notifications/message`).
    Log {
        /// `debug` … `emergency`.
        level: String,
        /// The logger's name.
        logger: Option<String>,
        /// The payload.
        data: Value,
    },
}

/// The client a request came from, as far as the request's handler needs it: progress for this
/// request, its cancellation, and the requests a server may make of its client.
#[derive(Clone)]
pub struct Caller {
    context: RequestContext<RoleServer>,
    /// When the call runs as a task (2026-07-28 tasks extension): questions for the client go
    /// through the task (`input_required`, answered with `tasks/update`), not as requests.
    task: Option<TaskContext>,
    /// On a 2026-07-28 request, which takes input-required results: the answers and state it
    /// carries from an earlier round (empty on the first).
    input: Option<InputRound>,
    /// Where the questions of a call held across input rounds go (see [`Caller::holding`]).
    questions: Option<tokio::sync::mpsc::UnboundedSender<HeldQuestion>>,
}

/// A question a held call asks its 2026-07-28 client: the request (`sampling/createMessage`,
/// `elicitation/create`) and where its answer goes once the client's retry brings it.
#[derive(Debug)]
pub struct HeldQuestion {
    /// The request's method.
    pub method: String,
    /// Its parameters, wire JSON.
    pub params: Value,
    /// The client's answer, wire JSON.
    pub answer: tokio::sync::oneshot::Sender<Value>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("request", &self.context.id)
            .finish()
    }
}

impl Caller {
    /// The caller of a request in `context`; `round` is the request's own `inputResponses`
    /// and `requestState`, kept for a 2026-07-28 client.
    fn new(
        context: RequestContext<RoleServer>,
        responses: Option<rmcp::model::InputResponses>,
        state: Option<String>,
    ) -> Caller {
        let modern = context
            .meta
            .get("io.modelcontextprotocol/protocolVersion")
            .is_some();
        let input = modern.then(|| InputRound {
            responses: responses.map(to_json),
            state,
        });
        Caller {
            context,
            task: None,
            input,
            questions: None,
        }
    }

    /// This caller for a call that outlives its request, held across a 2026-07-28 client's
    /// input rounds: a question a legacy-era server asks during it goes to `questions` (which
    /// the holder turns into an input-required result, answered in the client's retry)
    /// instead of being a request the client cannot take. Only dropping the call stops it.
    pub fn holding(&self, questions: tokio::sync::mpsc::UnboundedSender<HeldQuestion>) -> Caller {
        let mut caller = self.clone();
        caller.context.ct = tokio_util::sync::CancellationToken::new();
        caller.questions = Some(questions);
        caller
    }

    /// Asks through the holder of this call, and waits for the client's answer.
    async fn ask_held(
        questions: &tokio::sync::mpsc::UnboundedSender<HeldQuestion>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        questions
            .send(HeldQuestion {
                method: method.to_string(),
                params,
                answer,
            })
            .map_err(|_| format!("the call ended before the client was asked {method}"))?;
        answered
            .await
            .map_err(|_| format!("the client did not answer {method}"))
    }

    /// The answers and state of this request, when it comes from a 2026-07-28 client that
    /// takes input-required results (outside a task, whose questions go through the task).
    pub fn input_round(&self) -> Option<&InputRound> {
        self.input.as_ref().filter(|_| self.task.is_none())
    }

    /// Whether the client declared the extension `name` (`extensions` in its capabilities: on
    /// this request for a 2026-07-28 client, at `initialize` for a legacy one).
    pub fn declared_extension(&self, name: &str) -> bool {
        let capabilities = match self.context.client_capabilities() {
            Some(capabilities) => serde_json::to_value(capabilities).ok(),
            None => self
                .context
                .peer
                .peer_info()
                .and_then(|info| serde_json::to_value(&info.capabilities).ok()),
        };
        capabilities
            .as_ref()
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(name))
            .is_some_and(|e| !e.is_null())
    }

    /// Whether this 2026-07-28 request declared `capability` (`elicitation`, `sampling`,
    /// `roots`) in its `_meta`: what it can answer in an input-required result.
    pub fn declared(&self, capability: &str) -> bool {
        self.context
            .meta
            .client_capabilities()
            .map(to_json)
            .and_then(|c| c.get(capability).cloned())
            .is_some_and(|c| !c.is_null())
    }

    /// What a request made upstream on this client's behalf carries from it. A 2026-07-28
    /// client's capabilities, log level and answers go upstream, and the upstream's questions
    /// come back to it; a legacy client declared its capabilities at `initialize` and is asked
    /// directly, and `legacy_level` is the log level to ask for on its behalf.
    pub fn forwarding(&self, legacy_level: Option<&str>) -> Forwarding {
        let Some(round) = &self.input else {
            return Forwarding {
                client_capabilities: None,
                log_level: legacy_level.map(str::to_string),
                input: None,
                traceparent: None,
            };
        };
        Forwarding {
            // Passed on as the client sent them, not decoded and encoded again on every call.
            client_capabilities: self
                .context
                .meta
                .get(tether_mcp::input_rounds::CLIENT_CAPABILITIES)
                .cloned(),
            log_level: self
                .context
                .meta
                .get(tether_mcp::input_rounds::LOG_LEVEL)
                .and_then(Value::as_str)
                .map(str::to_string),
            // Inside a task the questions go through the task, as for any service.
            input: self.task.is_none().then(|| round.clone()),
            traceparent: None,
        }
    }

    /// A sender for this request's progress, when the client asked for progress; each
    /// value sent becomes one `notifications/progress` with the client's token. The handle
    /// finishes once every sender is dropped and all progress is sent: await it before
    /// answering, so no progress arrives after the result.
    pub fn progress(&self) -> Option<(UnboundedSender<Progress>, tokio::task::JoinHandle<()>)> {
        let token = self.context.meta.get_progress_token()?;
        let peer = self.context.peer.clone();
        let (sender, mut receiver) = unbounded_channel::<Progress>();
        let relay = tokio::spawn(async move {
            while let Some(progress) = receiver.recv().await {
                let value = json!({
                    "progressToken": token,
                    "progress": progress.progress,
                    "total": progress.total,
                    "message": progress.message,
                });
                let Ok(param) = serde_json::from_value(strip_nulls(value)) else {
                    continue;
                };
                if peer.notify_progress(param).await.is_err() {
                    break;
                }
            }
        });
        Some((sender, relay))
    }

    /// Resolves when the client cancels this request (or goes away).
    pub async fn cancelled(&self) {
        self.context.ct.cancelled().await;
    }

    /// Tells this client (only) that the tool list changed, as after a search loaded tools
    /// for it. Best effort: a client that has gone needs no notice.
    pub async fn tools_changed(&self) {
        let _ = self.context.peer.notify_tool_list_changed().await;
    }

    /// Whether the client declared `capability` (`sampling`, `elicitation`, `roots`).
    pub fn supports(&self, capability: &str) -> bool {
        // A 2026-07-28 client can be asked only through a task (it takes no requests from
        // servers), with the capabilities it declared on this request; a legacy client
        // declared them at `initialize`.
        let held = self.task.is_some() || self.questions.is_some();
        let capabilities = match (held, self.context.client_capabilities()) {
            (true, Some(capabilities)) => serde_json::to_value(capabilities).ok(),
            _ => self
                .context
                .peer
                .peer_info()
                .and_then(|info| serde_json::to_value(&info.capabilities).ok()),
        };
        capabilities
            .and_then(|c| c.get(capability).cloned())
            .is_some_and(|c| !c.is_null())
    }

    /// Asks the client through the task this call runs as, and waits for its answer.
    async fn ask_through_task(
        task: &TaskContext,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request: rmcp::model::InputRequest =
            serde_json::from_value(json!({"method": method, "params": params}))
                .map_err(|e| format!("invalid {method} request: {e}"))?;
        task.request_input(format!("{method}-{n}"), request)
            .await
            .map_err(|_| format!("the task ended before the client answered {method}"))
    }

    /// Checks a 2026-07-28 HTTP call's `Mcp-Param-*` headers against its arguments (SEP-2243):
    /// each parameter of `schema` marked `x-mcp-header` must travel in that header too, as its
    /// literal value or `=?base64?…?=`, so that proxies and load balancers routing on headers
    /// see what the server acts on. Other requests pass.
    pub fn check_param_headers(
        &self,
        schema: &Value,
        arguments: &Map<String, Value>,
    ) -> Result<(), ServeError> {
        let Some(parts) = self.context.extensions.get::<http::request::Parts>() else {
            return Ok(());
        };
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return Ok(());
        };
        if self.input.is_none() {
            return Ok(());
        }
        for (name, property) in properties {
            let Some(header) = property.get("x-mcp-header").and_then(Value::as_str) else {
                continue;
            };
            let field = format!("Mcp-Param-{header}");
            let sent = parts.headers.get(field.as_str());
            let expected = match arguments.get(name) {
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => Some(text.clone()),
                Some(other) => Some(other.to_string()),
            };
            let sent = match sent {
                None => None,
                Some(value) => Some(header_value(value.as_bytes()).ok_or_else(|| {
                    ServeError::HeaderMismatch(format!(
                        "header {field} is not valid: base64 values need =?base64?…?= around canonical base64 of UTF-8"
                    ))
                })?),
            };
            if sent != expected {
                return Err(ServeError::HeaderMismatch(format!(
                    "header {field} ({}) does not match argument \"{name}\" ({}) of the body",
                    sent.as_deref().unwrap_or("missing"),
                    expected.as_deref().unwrap_or("absent"),
                )));
            }
        }
        Ok(())
    }

    /// The W3C trace context the client sent with this request: `_meta.traceparent`, as MCP
    /// carries it, else the HTTP `traceparent` header.
    pub fn traceparent(&self) -> Option<&str> {
        if let Some(value) = self.context.meta.get("traceparent").and_then(Value::as_str) {
            return Some(value);
        }
        self.context
            .extensions
            .get::<http::request::Parts>()?
            .headers
            .get("traceparent")?
            .to_str()
            .ok()
    }

    /// Who sent this request over HTTP, when the endpoint authenticates; `None` on stdio and
    /// on an open loopback endpoint.
    pub fn principal(&self) -> Option<&crate::serve_auth::Principal> {
        self.context
            .extensions
            .get::<http::request::Parts>()?
            .extensions
            .get::<crate::serve_auth::Principal>()
    }

    /// The client's name and version, for logs.
    pub fn client_name(&self) -> Option<String> {
        self.context
            .peer
            .peer_info()
            .map(|info| format!("{} {}", info.client_info.name, info.client_info.version))
    }

    /// Asks the client to sample its model (`sampling/createMessage`, wire JSON both ways).
    pub async fn sample(&self, params: Value) -> Result<Value, String> {
        if !self.supports("sampling") {
            return Err("the connected client does not support sampling".into());
        }
        if let Some(task) = &self.task {
            return Caller::ask_through_task(task, "sampling/createMessage", params).await;
        }
        if let Some(questions) = &self.questions {
            return Caller::ask_held(questions, "sampling/createMessage", params).await;
        }
        let params = wire(params).map_err(|e| format!("invalid sampling request: {e}"))?;
        let result = self
            .context
            .peer
            .create_message(params)
            .await
            .map_err(|e| format!("the client refused sampling: {e}"))?;
        serde_json::to_value(result).map_err(|e| e.to_string())
    }

    /// Asks the client's user (`elicitation/create`); a client without the capability, or an
    /// error, reads as a decline.
    pub async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer {
        if !self.supports("elicitation") {
            return ElicitationAnswer::Decline;
        }
        let params = match request {
            ElicitationRequest::Form { message, schema } => {
                json!({"mode": "form", "message": message, "requestedSchema": schema})
            }
            ElicitationRequest::Url {
                message,
                url,
                elicitation_id,
            } => {
                json!({"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id})
            }
        };
        let value = if let Some(task) = &self.task {
            match Caller::ask_through_task(task, "elicitation/create", params).await {
                Ok(value) => value,
                Err(_) => return ElicitationAnswer::Decline,
            }
        } else if let Some(questions) = &self.questions {
            match Caller::ask_held(questions, "elicitation/create", params).await {
                Ok(value) => value,
                Err(_) => return ElicitationAnswer::Decline,
            }
        } else {
            let Ok(params) = wire(params) else {
                return ElicitationAnswer::Decline;
            };
            let Ok(result) = self.context.peer.create_elicitation(params).await else {
                return ElicitationAnswer::Decline;
            };
            serde_json::to_value(result).unwrap_or_default()
        };
        match value.get("action").and_then(Value::as_str) {
            Some("accept") => ElicitationAnswer::Accept(
                value
                    .get("content")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            ),
            Some("cancel") => ElicitationAnswer::Cancel,
            _ => ElicitationAnswer::Decline,
        }
    }
}

/// A plain `tools/call` as the edge read it.
#[derive(Debug)]
pub struct DirectCall<'a> {
    /// The tool, as the client named it.
    pub name: &'a str,
    /// The arguments as the client sent them (a JSON object's text).
    pub arguments: Option<&'a RawValue>,
    /// Who sent it, when the endpoint authenticates.
    pub principal: Option<&'a Principal>,
    /// What the client declared: at `initialize` for a session's client, on the request for a
    /// 2026-07-28 one (wire JSON).
    pub client_capabilities: &'a Value,
    /// What a 2026-07-28 request carries besides (`None` for a session's call).
    pub modern: Option<ModernRequest<'a>>,
    /// Where the call's progress goes, when the client asked for it.
    pub progress: Option<UnboundedSender<Progress>>,
}

/// The `_meta` of a 2026-07-28 request that a call passes on upstream.
#[derive(Debug)]
pub struct ModernRequest<'a> {
    /// The client's capabilities as it sent them.
    pub client_capabilities: &'a RawValue,
    /// The level it wants logs at, if it said.
    pub log_level: Option<&'a str>,
}

/// What the service made of a [`DirectCall`].
#[derive(Debug)]
pub enum DirectAnswer {
    /// The call's result (wire JSON), sent back as it is.
    Result(Box<RawValue>),
    /// A JSON-RPC error for the client.
    Error(ServeError),
    /// The full path must take it.
    FullPath,
}

/// Where an HTTP session's service enters itself once its client is initialized, so the
/// edge's hot path can find it by session id.
pub(crate) trait SessionListing<S: ?Sized>: Send + Sync {
    /// Enters session `id`, served by `service`, whose client declared `capabilities`.
    fn register(&self, id: &str, service: &Arc<S>, capabilities: Value);
}

/// What a server built on Tether offers. Every list is returned whole (the adapter pages
/// nothing: Tether's lists are in memory); errors become JSON-RPC errors, while a tool that
/// ran and failed is an `Ok` result with `is_error`.
#[async_trait]
pub trait McpService: Send + Sync + 'static {
    /// Name, version, instructions and which optional features it serves.
    fn info(&self) -> ServiceInfo;
    /// The tools to list now for `caller` (whose principal may be allowed only some).
    async fn list_tools(&self, caller: &Caller) -> Result<Vec<Tool>, ServeError>;
    /// Runs a plain `tools/call` of an HTTP session's client on the hot path, its arguments
    /// undecoded ([`crate::direct_calls`]); [`DirectAnswer::FullPath`] (the default) sends it
    /// to [`call_tool`](Self::call_tool) instead, as rmcp decodes it.
    async fn direct_call(&self, _call: DirectCall<'_>) -> DirectAnswer {
        DirectAnswer::FullPath
    }
    /// Runs a tool.
    async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
    ) -> Result<ToolResult, ServeError>;
    /// Whether a call of `name` should become a task for a client that takes tasks: the
    /// client gets a task id at once and polls, instead of holding a request open. Asked on
    /// every tool call from such a client, so it must be cheap.
    fn runs_as_task(&self, _name: &str, _caller: &Caller) -> bool {
        false
    }
    /// Its resources, as `caller` may see them.
    async fn list_resources(&self, _caller: &Caller) -> Result<Vec<Resource>, ServeError> {
        Ok(Vec::new())
    }
    /// Its resource templates, as `caller` may see them.
    async fn list_resource_templates(
        &self,
        _caller: &Caller,
    ) -> Result<Vec<ResourceTemplate>, ServeError> {
        Ok(Vec::new())
    }
    /// Reads a resource for `caller`.
    async fn read_resource(
        &self,
        uri: &str,
        _caller: &Caller,
    ) -> Result<Vec<ResourceContents>, ServeError> {
        Err(ServeError::NotFound {
            what: "resource",
            name: uri.to_string(),
        })
    }
    /// Its prompts, as `caller` may see them.
    async fn list_prompts(&self, _caller: &Caller) -> Result<Vec<Prompt>, ServeError> {
        Ok(Vec::new())
    }
    /// Expands a prompt for `caller`.
    async fn get_prompt(
        &self,
        name: &str,
        _arguments: Map<String, Value>,
        _caller: &Caller,
    ) -> Result<PromptResult, ServeError> {
        Err(ServeError::NotFound {
            what: "prompt",
            name: name.to_string(),
        })
    }
    /// Completion values for an argument, asked by `caller`.
    async fn complete(
        &self,
        _target: Completion<'_>,
        _argument: &str,
        _value: &str,
        _context: &std::collections::HashMap<String, String>,
        _caller: &Caller,
    ) -> Result<Vec<String>, ServeError> {
        Ok(Vec::new())
    }
    /// Starts telling this client (`caller`) when `uri` changes (`resources/subscribe`).
    async fn subscribe(&self, uri: &str, _caller: &Caller) -> Result<(), ServeError> {
        Err(ServeError::Refused(format!(
            "resource \"{uri}\" offers no subscription here"
        )))
    }
    /// Stops telling this client when `uri` changes (`resources/unsubscribe`).
    async fn unsubscribe(&self, _uri: &str) -> Result<(), ServeError> {
        Ok(())
    }
    /// Whether this client is to hear `change` (a resource update only if it subscribed).
    fn wants(&self, _change: &ServiceChange) -> bool {
        true
    }
    /// The least severe log level the client wants (`logging/setLevel`).
    fn set_log_level(&self, _level: &str) {}
    /// Changes to announce to clients, when it has any.
    fn changes(&self) -> Option<broadcast::Receiver<ServiceChange>> {
        None
    }
}

/// Converts between our types and rmcp's through their shared wire JSON.
fn wire<T: DeserializeOwned>(value: impl Serialize) -> Result<T, ErrorData> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .map_err(|e| ErrorData::internal_error(format!("result does not fit MCP: {e}"), None))
}

fn to_json(value: impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// A result in rmcp's type. Results built from JSON lack `resultType`, which 2026-07-28
/// clients require; rmcp strips it again for legacy peers.
fn result<T: DeserializeOwned>(mut value: Value) -> Result<T, ErrorData> {
    if let Value::Object(map) = &mut value {
        map.entry("resultType")
            .or_insert_with(|| Value::String("complete".into()));
    }
    wire(value)
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

/// An `Mcp-Param-*` header's value: `=?base64?…?=` decoded (strict, padded), anything else
/// literal; surrounding whitespace is not part of it. `None` when it does not decode.
fn header_value(raw: &[u8]) -> Option<String> {
    use base64::Engine;
    let text = std::str::from_utf8(raw).ok()?.trim();
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_string()),
    }
}

#[cfg(test)]
mod header_tests {
    use super::header_value;

    #[test]
    fn param_headers_are_literal_or_strict_base64() {
        assert_eq!(header_value(b" Hello ").as_deref(), Some("Hello"));
        assert_eq!(
            header_value(b"=?base64?SGVsbG8=?=").as_deref(),
            Some("Hello")
        );
        // Unpadded and out-of-alphabet base64 are refused, not read as text.
        assert_eq!(header_value(b"=?base64?SGVsbG8?="), None);
        assert_eq!(header_value(b"=?base64?SGVs!!!bG8=?="), None);
        // Without both markers the value is literal.
        assert_eq!(
            header_value(b"=?base64?SGVsbG8=").as_deref(),
            Some("=?base64?SGVsbG8=")
        );
    }
}
