//! The gateway behind `tether serve`: every configured server as one MCP server. It starts the
//! servers with the same [`ServerRegistry`] the host uses, keeps their tools in the same
//! [`ToolCatalog`], offers them through the same [`ToolSelection`] modes (every tool, a search
//! tool, or `mcp_query`) and enforces the config's approval rules with the same policy; it is an
//! [`McpService`], so `tether-mcp`'s one adapter puts it on stdio or HTTP. What flows back up
//! (progress, logs, list changes) reaches the client, and what servers ask of their client
//! (sampling, elicitation) is relayed to the client whose call caused it.

mod direct;
mod session;
mod traces;

pub use session::GatewaySession;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use futures::future::{BoxFuture, join_all};
use serde_json::{Map, Value, json};
use tether_catalog::permission::{decision_from_form, permission_form};
use tether_catalog::policy::{ApprovalMode, ApprovalRules, Decision, Hints, decide};
use tether_catalog::selection::{
    Resolved, SelectionMode, SelectionOptions, ToolSelection, selection_for,
};
use tether_catalog::{PermissionDecision, ServerTools, Snapshot, StandingAnswers, ToolCatalog};
use tether_mcp::input_rounds::{Forwarding, InputRequired, InputRound, Reply, unguessable_token};
use tether_mcp::router::qualify;
use tether_mcp::{
    Completion, ElicitationAnswer, ElicitationRequest, HostHandler, McpError, Root, ServerConfig,
    ServerConnection, ServerNotice, ServerRegistry, ServerState,
};
use tether_protocol::{
    ContentBlock, MCP_APPS_EXTENSION, Prompt, PromptResult, ProtocolEra, Resource,
    ResourceContents, ResourceTemplate, Tool, ToolAnnotations, ToolResult,
};
use tether_serve::serve::HeldQuestion;
use tether_serve::{
    CallOutcome, Caller, DirectAnswer, DirectCall, McpService, Principal, Readiness, ServeError,
    ServeMetrics, ServiceChange, ServiceInfo,
};
use tokio::sync::{broadcast, mpsc};

/// How the gateway presents its servers.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// `all`, `search` or `meta` (`auto` is served as `all`: a gateway has no context window).
    pub mode: SelectionMode,
    /// Qualify tool and prompt names with their server (`server__tool`). Off (`--no-prefix`)
    /// only with one upstream server, whose names then pass unchanged.
    pub prefix: bool,
    /// The config's `"approval"` rules: `deny` blocks, `ask` needs the client's user.
    pub rules: ApprovalRules,
    /// The tool pin file: tools that changed since they were pinned are blocked until
    /// `tether pins accept SERVER`. `None`: no pinning.
    pub pins: Option<std::path::PathBuf>,
    /// Where tool calls are counted and timed (`/metrics` over HTTP).
    pub metrics: Arc<ServeMetrics>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            mode: SelectionMode::All,
            prefix: true,
            rules: ApprovalRules::default(),
            pins: None,
            metrics: ServeMetrics::new(),
        }
    }
}

/// Callers with a tool call in flight, per upstream server, so a request that server makes of
/// its client (sampling, elicitation) goes to the client whose call is running there.
/// A call on the hot path has no caller: it cannot be asked about.
type CallsInFlight = Arc<Mutex<HashMap<String, Vec<(u64, Option<Caller>)>>>>;

/// The gateway's side of the upstream servers' requests and notices.
struct GatewayHost {
    notices: mpsc::UnboundedSender<(String, ServerNotice)>,
    in_flight: CallsInFlight,
}

impl GatewayHost {
    /// The one client with a call in flight on `server`; with none or several, nobody can
    /// be asked on the server's behalf without guessing.
    fn caller_for(&self, server: &str) -> Result<Caller, String> {
        let calls = self
            .in_flight
            .lock()
            .map_err(|_| "the gateway's call table is unavailable".to_string())?;
        match calls.get(server).map(Vec::as_slice) {
            Some([(_, Some(caller))]) => Ok(caller.clone()),
            Some([(_, None)]) => Err(format!(
                "server \"{server}\" asked its client during a call that took the gateway's hot path, whose client cannot be asked"
            )),
            Some([_, _, ..]) => Err(format!(
                "server \"{server}\" has several calls in flight through the gateway; cannot tell which client to ask"
            )),
            _ => Err(format!(
                "server \"{server}\" asked its client outside a tool call; the gateway relays requests only during calls"
            )),
        }
    }
}

impl HostHandler for GatewayHost {
    fn roots(&self) -> Vec<Root> {
        // A gateway widens no server's reach: servers keep the directories they were given.
        Vec::new()
    }

    fn sample<'a>(
        &'a self,
        server: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move { self.caller_for(server)?.sample(params).await })
    }

    fn elicit<'a>(
        &'a self,
        server: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            match self.caller_for(server) {
                Ok(caller) => caller.elicit(request).await,
                Err(_) => ElicitationAnswer::Decline,
            }
        })
    }

    fn notify(&self, server: &str, notice: ServerNotice) {
        let _ = self.notices.send((server.to_string(), notice));
    }
}

/// Every configured server behind one MCP server; shared by all client sessions.
pub struct Gateway {
    registry: ServerRegistry,
    catalog: ToolCatalog,
    options: GatewayOptions,
    changes: broadcast::Sender<ServiceChange>,
    in_flight: CallsInFlight,
    next_call: AtomicU64,
    /// Which server owns a resource URI or template, learned from the last listings.
    resource_owners: Mutex<HashMap<String, String>>,
    /// Calls held across a 2026-07-28 client's input rounds, by the token in its request state.
    held: Mutex<HashMap<String, HeldCall>>,
    /// Whether spans are exported (OTLP configured): then every call takes the full path,
    /// which makes them.
    traced: bool,
}

/// A tool call on a legacy-era server held across a 2026-07-28 client's input rounds: the
/// server asked a question mid-call, which the client can only answer in a retry, so the call
/// keeps running between the client's requests. Replica-local, like the call itself.
struct HeldCall {
    call: AbortOnDrop,
    questions: mpsc::UnboundedReceiver<HeldQuestion>,
    /// The question asked last, under its key, waiting for the client's answer.
    waiting: Option<(String, tokio::sync::oneshot::Sender<Value>)>,
    /// Who may answer: the principal of the request that started the call.
    principal: Option<String>,
    since: std::time::Instant,
}

/// A spawned call that stops when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<Result<ToolResult, ServeError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a held call waits for the client's next round before it is dropped (and the
/// upstream call cancelled).
const HELD_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// Marks the request state that names a held call.
const HELD: &str = "dev.tether/held:";

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("servers", &self.registry.entries().len())
            .field("options", &self.options)
            .finish()
    }
}

/// Why the gateway cannot start as asked.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// `--no-prefix` needs exactly one upstream server.
    #[error(
        "--no-prefix keeps tool names as they are, which needs exactly one upstream server; {0} are connected (drop --no-prefix, or configure one server)"
    )]
    NoPrefixNeedsOneServer(usize),
}

impl Gateway {
    /// Starts every server and lists their tools. Servers that fail are returned beside the
    /// gateway (it serves the others).
    pub async fn start(
        servers: Vec<ServerConfig>,
        options: GatewayOptions,
    ) -> Result<(Arc<Gateway>, Vec<McpError>), GatewayError> {
        let (notices, receiver) = mpsc::unbounded_channel();
        let in_flight = CallsInFlight::default();
        let host = Arc::new(GatewayHost {
            notices,
            in_flight: in_flight.clone(),
        });
        let registry = ServerRegistry::start(servers, host).await;
        let mut failures: Vec<McpError> = registry.failures().cloned().collect();
        let (catalog, errors) = ToolCatalog::load(&registry).await;
        failures.extend(errors);
        if let Some(path) = &options.pins {
            match tether_catalog::PinBook::load(path) {
                Ok(book) => {
                    for report in catalog.pin(&registry, book) {
                        for line in report.lines() {
                            tracing::warn!("{line}");
                        }
                    }
                }
                Err(error) => tracing::warn!("{error}; tools are not pinned"),
            }
        }
        let connected = registry.connections().count();
        if !options.prefix && connected != 1 {
            registry.shutdown().await;
            return Err(GatewayError::NoPrefixNeedsOneServer(connected));
        }
        let (changes, _) = broadcast::channel(64);
        let gateway = Arc::new(Gateway {
            registry,
            catalog,
            options,
            changes,
            in_flight,
            next_call: AtomicU64::new(0),
            resource_owners: Mutex::default(),
            held: Mutex::default(),
            traced: [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty())),
        });
        tokio::spawn(relay_notices(Arc::downgrade(&gateway), receiver));
        Ok((gateway, failures))
    }

    /// A session for one client: its own loaded tools in search mode.
    pub fn session(self: &Arc<Gateway>) -> Arc<GatewaySession> {
        let mode = match self.options.mode {
            SelectionMode::Auto => SelectionMode::All,
            other => other,
        };
        let selection = selection_for(&SelectionOptions {
            mode,
            preload: 0,
            ..SelectionOptions::default()
        });
        Arc::new(GatewaySession {
            log_level: Mutex::new(None),
            subscribed: Mutex::new(Default::default()),
            standing: StandingAnswers::default(),
            gateway: self.clone(),
            selection,
            allowed_view: Mutex::default(),
        })
    }

    /// The servers behind the gateway.
    pub fn registry(&self) -> &ServerRegistry {
        &self.registry
    }

    /// Stops every server. Sessions still holding the gateway keep it (and their servers,
    /// which die with the process) alive.
    pub async fn shutdown(self: Arc<Gateway>) {
        if let Ok(gateway) = Arc::try_unwrap(self) {
            gateway.registry.shutdown().await;
        }
    }

    fn connection(&self, server: &str) -> Result<&ServerConnection, ServeError> {
        self.registry
            .connection(server)
            .map_err(|e| ServeError::Internal(e.to_string()))
    }

    /// The name a client sees for a server's tool or prompt.
    fn exposed(&self, server: &str, name: &str) -> String {
        if self.options.prefix {
            qualify(server, name)
        } else {
            name.to_string()
        }
    }

    /// Runs `server`'s tool for `caller`, relaying progress, cancellation and (for a 2026-07-28
    /// client) the upstream's questions and the client's answers.
    async fn call_upstream(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
        forwarding: &Forwarding,
    ) -> Result<ToolResult, ServeError> {
        let connection = self.connection(server)?;
        let started = std::time::Instant::now();
        let id = self.next_call.fetch_add(1, Ordering::Relaxed);
        let _registered =
            InFlightGuard::register(&self.in_flight, server, id, Some(caller.clone()));
        let (progress, relayed) = caller.progress().unzip();
        let call = |traceparent| {
            let forwarding = Forwarding {
                traceparent,
                ..forwarding.clone()
            };
            async move {
                connection
                    .call_tool_for(tool, Some(arguments), progress, Some(&forwarding))
                    .await
            }
        };
        let call = traces::upstream("tools/call", server, tool, call, |result| match result {
            Ok(Reply::Complete(result)) if result.is_error => {
                Some("the tool returned an error".into())
            }
            Ok(_) => None,
            Err(error) => Some(error.to_string()),
        });
        let (outcome, counted) = tokio::select! {
            result = call => match result {
                Ok(Reply::Complete(result)) => (Ok(result), CallOutcome::Ok),
                Ok(Reply::InputRequired(questions)) => (Err(ServeError::NeedsInput(questions)), CallOutcome::Ok),
                Err(McpError::UnknownItem { .. }) => (Err(ServeError::NotFound { what: "tool", name: tool.to_string() }), CallOutcome::Error),
                Err(error @ McpError::Rpc { .. }) => (Err(passed_on(error)), CallOutcome::Error),
                Err(error) => (Ok(error_result(error.to_string())), CallOutcome::Error),
            },
            // Dropping the call sends notifications/cancelled upstream.
            _ = caller.cancelled() => (Err(ServeError::Refused(format!("the client cancelled the call to \"{tool}\""))), CallOutcome::Cancelled),
        };
        self.options
            .metrics
            .tool_call(server, tool, counted, started.elapsed().as_secs_f64());
        // Progress the server sent before its answer reaches the client before the answer
        // does (the call has dropped its sender, so the relay ends once it has sent it all).
        if let Some(relayed) = relayed {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), relayed).await;
        }
        outcome
    }

    /// The server that owns `uri`, or the client's error for an unknown resource.
    async fn owner_of(&self, uri: &str) -> Result<String, ServeError> {
        self.resource_owner(uri)
            .await
            .ok_or_else(|| ServeError::NotFound {
                what: "resource",
                name: uri.to_string(),
            })
    }

    /// Whether `server` speaks the legacy era (2025-11-25 and before), whose servers ask their
    /// client with requests during a call.
    fn speaks_legacy(&self, server: &str) -> bool {
        self.registry
            .connection(server)
            .is_ok_and(|c| c.summary().era == ProtocolEra::Legacy)
    }

    /// Runs `server`'s tool for a 2026-07-28 `caller` as a held call: a question the (legacy-era)
    /// server asks mid-call becomes an input-required result, and the call waits, still
    /// running, for the client's retry ([`resume`](Self::resume)).
    async fn call_held(
        self: &Arc<Self>,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
        forwarding: &Forwarding,
    ) -> Result<ToolResult, ServeError> {
        let (sink, questions) = mpsc::unbounded_channel();
        let holder = caller.holding(sink);
        let (gateway, server, tool) = (self.clone(), server.to_string(), tool.to_string());
        let forwarding = forwarding.clone();
        let call = tokio::spawn(traces::in_current_trace(async move {
            gateway
                .call_upstream(&server, &tool, arguments, &holder, &forwarding)
                .await
        }));
        let held = HeldCall {
            call: AbortOnDrop(call),
            questions,
            waiting: None,
            principal: caller.principal().map(|p| p.name.clone()),
            since: std::time::Instant::now(),
        };
        self.drive(held, caller).await
    }

    /// Goes on with the call held under `token`, given the client's answer in `round`.
    async fn resume(
        &self,
        token: &str,
        round: &InputRound,
        caller: &Caller,
    ) -> Result<ToolResult, ServeError> {
        let gone = || {
            ServeError::InvalidParams(
                "the request state names no call held here: it ended, waited too long, or another gateway replica holds it; call the tool again".into(),
            )
        };
        let mut held = self
            .held
            .lock()
            .ok()
            .and_then(|mut held| held.remove(token))
            .ok_or_else(gone)?;
        if held.principal != caller.principal().map(|p| p.name.clone()) {
            // Not this client's call: it stays for the one that started it.
            self.hold(token.to_string(), held);
            return Err(gone());
        }
        if let Some((key, answer)) = held.waiting.take() {
            let Some(value) = round.answer(&key) else {
                let missing = format!("the retry carries no answer to \"{key}\"");
                held.waiting = Some((key, answer));
                self.hold(token.to_string(), held);
                return Err(ServeError::InvalidParams(missing));
            };
            let _ = answer.send(value.clone());
        }
        self.drive(held, caller).await
    }

    /// Waits for the held call to end or to ask its next question, which it turns into an
    /// input-required result naming the call. A client that cancels the request drops the call.
    async fn drive(&self, mut held: HeldCall, caller: &Caller) -> Result<ToolResult, ServeError> {
        tokio::select! {
            ended = &mut held.call.0 => ended.unwrap_or_else(|e| {
                Err(ServeError::Internal(format!("the call stopped: {e}")))
            }),
            Some(question) = held.questions.recv() => {
                let token = unguessable_token().ok_or_else(|| {
                    ServeError::Internal("no randomness to name a held call with".into())
                })?;
                let key = format!("dev.tether/{}", question.method.replace('/', "-"));
                let result = json!({
                    "resultType": "input_required",
                    "inputRequests": {
                        (key.clone()): {"method": question.method, "params": question.params},
                    },
                    "requestState": format!("{HELD}{token}"),
                });
                held.waiting = Some((key, question.answer));
                held.since = std::time::Instant::now();
                self.hold(token, held);
                Err(ServeError::NeedsInput(InputRequired { result }))
            }
            () = caller.cancelled() => Err(ServeError::Refused(
                "the client cancelled the call".into(),
            )),
        }
    }

    /// Keeps `held` under `token` for the client's next round, dropping calls that waited
    /// longer than [`HELD_FOR`].
    fn hold(&self, token: String, held: HeldCall) {
        if let Ok(mut calls) = self.held.lock() {
            calls.retain(|_, call| call.since.elapsed() < HELD_FOR);
            calls.insert(token, held);
        }
    }

    /// Which server owns `uri`, from the listings (refreshed once when unknown).
    async fn resource_owner(&self, uri: &str) -> Option<String> {
        if let Some(owner) = self.known_owner(uri) {
            return Some(owner);
        }
        let _ = self.list_resources().await;
        let _ = self.list_templates().await;
        if let Some(owner) = self.known_owner(uri) {
            return Some(owner);
        }
        let mut with_resources = self
            .registry
            .connections()
            .filter(|c| c.summary().has_capability("resources"));
        match (with_resources.next(), with_resources.next()) {
            (Some(only), None) => Some(only.name().to_string()),
            _ => None,
        }
    }

    fn known_owner(&self, uri: &str) -> Option<String> {
        let owners = self.resource_owners.lock().ok()?;
        if let Some(owner) = owners.get(uri) {
            return Some(owner.clone());
        }
        // A template's fixed start (`demo://resource/{id}` → `demo://resource/`) claims URIs.
        owners
            .iter()
            .filter_map(|(key, owner)| {
                let prefix = key.split('{').next()?;
                (key.contains('{') && !prefix.is_empty() && uri.starts_with(prefix))
                    .then_some((prefix.len(), owner))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, owner)| owner.clone())
    }

    /// One list from every server, each item with its server; a server that fails is
    /// logged and left out.
    async fn gather<T>(
        &self,
        what: &str,
        list: impl AsyncFn(&ServerConnection) -> Result<Vec<T>, McpError>,
    ) -> Vec<(String, T)> {
        let list = &list;
        let lists = join_all(
            self.registry
                .connections()
                .map(|c| async move { (c.name().to_string(), list(c).await) }),
        )
        .await;
        let mut all = Vec::new();
        for (server, items) in lists {
            match items {
                Ok(items) => all.extend(items.into_iter().map(|item| (server.clone(), item))),
                Err(error) => tracing::warn!(%error, "gateway: listing {what}"),
            }
        }
        all
    }

    /// Remembers which server listed each URI or URI template.
    fn learn_owners<'a>(&self, owned: impl Iterator<Item = (&'a String, &'a String)>) {
        if let Ok(mut owners) = self.resource_owners.lock() {
            for (key, server) in owned {
                owners.insert(key.clone(), server.clone());
            }
        }
    }

    /// Every server's resources, each with the server that listed it.
    async fn list_resources(&self) -> Vec<(String, Resource)> {
        let all = self
            .gather("resources", async |c| c.list_resources().await)
            .await;
        self.learn_owners(all.iter().map(|(server, r)| (&r.uri, server)));
        all
    }

    /// Every server's resource templates, each with the server that listed it.
    async fn list_templates(&self) -> Vec<(String, ResourceTemplate)> {
        let all = self
            .gather("resource templates", async |c| {
                c.list_resource_templates().await
            })
            .await;
        self.learn_owners(all.iter().map(|(server, t)| (&t.uri_template, server)));
        all
    }

    /// Every server's prompts with the names clients see.
    async fn prompts(&self) -> Vec<(String, Prompt)> {
        self.gather("prompts", async |c| c.list_prompts().await)
            .await
    }

    /// The server and upstream name of the prompt a client calls `name`.
    async fn find_prompt(&self, name: &str) -> Result<(String, String), ServeError> {
        self.prompts()
            .await
            .into_iter()
            .find(|(server, prompt)| self.exposed(server, &prompt.name) == name)
            .map(|(server, prompt)| (server, prompt.name))
            .ok_or_else(|| ServeError::NotFound {
                what: "prompt",
                name: name.to_string(),
            })
    }
}

impl Readiness for Gateway {
    /// Ready while at least one upstream server is connected (one that went away is started
    /// again on its next call, so it counts).
    fn ready(&self) -> Result<(), String> {
        if self.registry.connections().next().is_some() {
            Ok(())
        } else {
            Err("no upstream server is connected".into())
        }
    }

    fn observe(&self, metrics: &ServeMetrics) {
        for entry in self.registry.entries() {
            let up = matches!(entry.state(), ServerState::Connected(c) if !c.is_down());
            metrics.upstream(entry.name(), up);
        }
    }
}

/// Keeps a call in the in-flight table while it runs.
struct InFlightGuard<'a> {
    table: &'a CallsInFlight,
    server: String,
    id: u64,
}

impl<'a> InFlightGuard<'a> {
    fn register(table: &'a CallsInFlight, server: &str, id: u64, caller: Option<Caller>) -> Self {
        if let Ok(mut calls) = table.lock() {
            calls
                .entry(server.to_string())
                .or_default()
                .push((id, caller));
        }
        InFlightGuard {
            table,
            server: server.to_string(),
            id,
        }
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.table.lock()
            && let Some(list) = calls.get_mut(&self.server)
        {
            list.retain(|(id, _)| *id != self.id);
        }
    }
}

/// Tools that changed since they were pinned are blocked; whoever runs the gateway reads why in
/// its log.
fn log_pin_reports(catalog: &ToolCatalog) {
    for report in catalog.take_pin_reports() {
        for line in report.lines() {
            tracing::warn!("{line}");
        }
    }
}

/// Turns upstream notices into changes for every client, refreshing the catalogue first when
/// tools changed so a client that lists again sees the new tools.
async fn relay_notices(
    gateway: Weak<Gateway>,
    mut notices: mpsc::UnboundedReceiver<(String, ServerNotice)>,
) {
    while let Some((server, notice)) = notices.recv().await {
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        let change = match notice {
            ServerNotice::ListChanged { what: "tools" } => {
                gateway.catalog.refresh(&gateway.registry).await;
                log_pin_reports(&gateway.catalog);
                ServiceChange::Tools
            }
            ServerNotice::ListChanged { what: "resources" } => ServiceChange::Resources,
            ServerNotice::ListChanged { .. } => ServiceChange::Prompts,
            ServerNotice::ResourceUpdated { uri } => ServiceChange::ResourceUpdated(uri),
            // Clients hear about it as a warning, then as a tool change: the new process may
            // offer other tools.
            ServerNotice::Restarted { restarts, reason } => {
                // The operator's log too, not only the clients': a crash loop shows here.
                tracing::warn!(server = %server, restarts, "server \"{server}\" restarted: {reason}");
                let _ = gateway.changes.send(ServiceChange::Log {
                    level: "warning".into(),
                    logger: Some(server.clone()),
                    data: Value::String(format!(
                        "server \"{server}\" restarted (restart {restarts}): {reason}"
                    )),
                });
                let refresh = gateway.catalog.refresh(&gateway.registry).await;
                log_pin_reports(&gateway.catalog);
                match refresh {
                    Some(refresh) if !refresh.servers.is_empty() => ServiceChange::Tools,
                    _ => continue,
                }
            }
            // The gateway waits for every server at start; a server that joins later is a
            // change of tools all the same.
            ServerNotice::JoinedLate { .. } => {
                gateway.catalog.refresh(&gateway.registry).await;
                ServiceChange::Tools
            }
            ServerNotice::Log {
                level,
                logger,
                data,
            } => ServiceChange::Log {
                level,
                logger: Some(match logger {
                    Some(logger) => format!("{server}/{logger}"),
                    None => server,
                }),
                data,
            },
        };
        let _ = gateway.changes.send(change);
    }
}

fn error_result(text: String) -> ToolResult {
    ToolResult {
        content: vec![ContentBlock::Text { text }],
        is_error: true,
        ..ToolResult::default()
    }
}

fn text_result(text: String) -> ToolResult {
    ToolResult {
        content: vec![ContentBlock::Text { text }],
        ..ToolResult::default()
    }
}

/// An upstream server's JSON-RPC error, passed on to the client with its code and data (a
/// missing client capability, an unknown resource, a tampered request state all mean
/// something to the client), under a message that names the server.
fn passed_on(error: McpError) -> ServeError {
    let message = error.to_string();
    match error {
        McpError::Rpc { code, data, .. } => ServeError::Upstream {
            code,
            message,
            data: data.map(|data| *data),
        },
        _ => ServeError::Internal(message),
    }
}
