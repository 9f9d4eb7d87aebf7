//! `tether acp`: Tether as an Agent Client Protocol agent (protocol version 1: JSON-RPC 2.0,
//! one message per line on stdin and stdout), so editors (Zed, JetBrains, Neovim, Emacs) host
//! it. Each ACP session is one engine session (`engine.rs`): a prompt is an op, the session's
//! events become `session/update` notifications, its permission questions become
//! `session/request_permission` requests whose answers go back as decision ops, and
//! `session/cancel` interrupts the turn (every pending question is answered "cancelled").
//! Sessions are saved as the chat saves them, so `session/load` replays one and continues it.
//! Incoming params are read with the official schema crate's types
//! (`agent-client-protocol-schema`); what we send is written in the wire shape directly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tether_agent::{AgentEvent, ApprovalMode, InputBlock, Op, PermissionDecision, StopReason};
use tether_mcp::{Root, ServerConfig, Transport};
use tether_protocol::chat::Message;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::sync::mpsc::{self, UnboundedSender};

use tether_agent::Settings;

use crate::Failure;
use crate::engine::{EngineStart, start};
use crate::models::ModelArgs;
use crate::session::{Record, SessionLog};

mod commands;

use commands::{Mirror, Pending};

/// The ACP version we speak.
const PROTOCOL_VERSION: u64 = 1;
/// Longest message taken from the editor (a prompt with embedded files fits).
const MAX_LINE: u64 = 64 << 20;

/// What every session of this agent starts from.
pub(crate) struct AcpConfig {
    /// The user's configured servers (the editor's are added per session).
    pub(crate) servers: Vec<ServerConfig>,
    /// The config's top-level settings.
    pub(crate) settings: Settings,
    /// The model flags.
    pub(crate) args: ModelArgs,
    /// Least severe server log level shown.
    pub(crate) log_level: usize,
    /// `--timeout`, for the built-in server.
    pub(crate) timeout: Option<Duration>,
}

/// The agent: its sessions, and the requests it sent the editor that wait for an answer.
struct Agent {
    config: AcpConfig,
    out: UnboundedSender<Value>,
    next_id: AtomicU64,
    sessions: Mutex<HashMap<String, Arc<AcpSession>>>,
    /// Our `session/request_permission` ids → the session and the question they answer.
    asked: Mutex<HashMap<u64, (Arc<AcpSession>, String)>>,
    /// Each session's pump, awaited when the editor goes away so its servers are stopped.
    pumps: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// One editor session on one engine session.
struct AcpSession {
    id: String,
    ops: UnboundedSender<Op>,
    /// The editor's request waiting for the session: a prompt for its turn's end, a slash
    /// command or a model change for the session's answer.
    pending: Mutex<Option<Pending>>,
    log: Option<Mutex<SessionLog>>,
    /// The servers, catalogue and tool selection the session shares, for `/servers` and
    /// `/tools`.
    registry: Arc<tokio::sync::RwLock<tether_mcp::ServerRegistry>>,
    catalog: tether_catalog::ToolCatalog,
    selection: Arc<dyn tether_catalog::ToolSelection>,
    /// What the slash commands show of the session's state, kept from its events.
    mirror: Mutex<Mirror>,
}

/// `tether acp`: serves one editor on stdin and stdout until stdin ends.
pub(crate) async fn serve(config: AcpConfig) -> Result<(), Failure> {
    let (out, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        use std::io::Write;
        let mut stdout = std::io::stdout();
        while let Some(message) = outgoing.recv().await {
            let line = message.to_string();
            if writeln!(stdout, "{line}")
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return;
            }
        }
    });
    let agent = Arc::new(Agent {
        config,
        out,
        next_id: AtomicU64::new(1),
        sessions: Mutex::new(HashMap::new()),
        asked: Mutex::new(HashMap::new()),
        pumps: Mutex::new(Vec::new()),
    });
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = String::new();
    loop {
        line.clear();
        match (&mut input).take(MAX_LINE).read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(message) => agent.clone().receive(message),
            Err(error) => agent.send(json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32700, "message": format!("not JSON: {error}")}})),
        }
    }
    // The editor went away: end every session and stop its servers.
    let sessions: Vec<Arc<AcpSession>> = agent
        .sessions
        .lock()
        .map(|mut s| s.drain().map(|(_, v)| v).collect())
        .unwrap_or_default();
    for session in sessions {
        let _ = session.ops.send(Op::Shutdown);
    }
    // Give the session tasks a moment to stop their servers (each pump waits for its engine).
    let pumps: Vec<tokio::task::JoinHandle<()>> = agent
        .pumps
        .lock()
        .map(|mut p| p.drain(..).collect())
        .unwrap_or_default();
    drop(agent);
    let _ = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(pumps)).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    Ok(())
}

fn params<T: DeserializeOwned>(params: Value) -> Result<T, Value> {
    serde_json::from_value(params)
        .map_err(|e| json!({"code": -32602, "message": format!("invalid params: {e}")}))
}

impl Agent {
    fn send(&self, message: Value) {
        let _ = self.out.send(message);
    }

    fn reply(&self, id: Value, outcome: Result<Value, Value>) {
        self.send(match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        });
    }

    fn update(&self, session: &str, update: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": session, "update": update}}));
    }

    fn session(&self, id: &str) -> Result<Arc<AcpSession>, Value> {
        self.sessions
            .lock()
            .ok()
            .and_then(|s| s.get(id).cloned())
            .ok_or_else(|| json!({"code": -32602, "message": format!("no session \"{id}\"; create one with session/new")}))
    }

    /// One message from the editor: a request, a notification or an answer to our request.
    fn receive(self: Arc<Self>, message: Value) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string);
        let id = message.get("id").cloned();
        let body = message.get("params").cloned().unwrap_or(Value::Null);
        match (method, id) {
            (Some(method), Some(id)) => {
                // Requests run side by side: a long session/prompt must not hold up the
                // editor's answers to our permission requests or its cancel.
                tokio::spawn(async move {
                    let outcome = self.request(&method, body, id.clone()).await;
                    if let Some(outcome) = outcome {
                        self.reply(id, outcome);
                    }
                });
            }
            (Some(method), None) => self.notification(&method, body),
            (None, Some(id)) => self.answered(id, message),
            (None, None) => self.send(json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": "neither a request, a notification nor a response"}})),
        }
    }

    /// Answers a request; `None` when the answer comes later (a prompt, at its turn's end).
    async fn request(
        self: &Arc<Self>,
        method: &str,
        body: Value,
        id: Value,
    ) -> Option<Result<Value, Value>> {
        Some(match method {
            "initialize" => Ok(json!({
                "protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {
                    "loadSession": true,
                    "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                    "mcpCapabilities": {"http": true, "sse": true},
                },
                "agentInfo": {"name": "tether", "title": "Tether", "version": env!("CARGO_PKG_VERSION")},
                "authMethods": [],
            })),
            "authenticate" => Ok(json!({})),
            "session/new" => match params::<acp::NewSessionRequest>(body) {
                Ok(request) => {
                    let opened = self
                        .open(&request.cwd, request.mcp_servers, None, Vec::new(), id)
                        .await;
                    return opened.err().map(Err);
                }
                Err(error) => Err(error),
            },
            "session/load" => match params::<acp::LoadSessionRequest>(body) {
                Ok(request) => return self.load(request, id).await.err().map(Err),
                Err(error) => Err(error),
            },
            "session/prompt" => match params::<acp::PromptRequest>(body) {
                Ok(request) => return self.prompt(request, id).await,
                Err(error) => Err(error),
            },
            "session/set_config_option" => {
                match params::<acp::SetSessionConfigOptionRequest>(body) {
                    Ok(request) => return self.set_config_option(request, id),
                    Err(error) => Err(error),
                }
            }
            "session/set_mode" => match params::<acp::SetSessionModeRequest>(body) {
                Ok(request) => self.set_mode(&request.session_id.0, &request.mode_id.0),
                Err(error) => Err(error),
            },
            other => Err(
                json!({"code": -32601, "message": format!("method \"{other}\" is not supported by tether")}),
            ),
        })
    }

    fn notification(&self, method: &str, body: Value) {
        if method == "session/cancel"
            && let Ok(request) = params::<acp::CancelNotification>(body)
            && let Ok(session) = self.session(&request.session_id.0)
        {
            let _ = session.ops.send(Op::Interrupt);
        }
    }

    /// The editor's answer to one of our permission requests.
    fn answered(&self, id: Value, message: Value) {
        let Some(asked) = id
            .as_u64()
            .and_then(|id| self.asked.lock().ok().and_then(|mut a| a.remove(&id)))
        else {
            return;
        };
        let (session, request_id) = asked;
        let decision = message
            .get("result")
            .and_then(|r| serde_json::from_value::<acp::RequestPermissionResponse>(r.clone()).ok())
            .map_or(PermissionDecision::Cancelled, |r| match r.outcome {
                acp::RequestPermissionOutcome::Selected(selected) => {
                    serde_json::from_value(Value::String(selected.option_id.0.to_string()))
                        .unwrap_or(PermissionDecision::RejectOnce)
                }
                _ => PermissionDecision::Cancelled,
            });
        let _ = session.ops.send(Op::Decide {
            request_id,
            decision,
        });
    }

    /// Starts a session over the user's servers and the editor's (`saved` continues one) and
    /// answers request `reply_to` before the session's first update goes out, so the editor
    /// knows the session an update names. `Err` is the answer when it could not start.
    async fn open(
        self: &Arc<Self>,
        cwd: &Path,
        editor_servers: Vec<acp::McpServer>,
        saved: Option<(PathBuf, String)>,
        history: Vec<Message>,
        reply_to: Value,
    ) -> Result<(), Value> {
        let invalid = |message: String| json!({"code": -32602, "message": message});
        if !cwd.is_absolute() {
            return Err(invalid(format!(
                "cwd \"{}\" is not an absolute path",
                cwd.display()
            )));
        }
        let history_len = history.len();
        let mut servers = self.config.servers.clone();
        let mut problems = Vec::new();
        for server in editor_servers {
            match server_config(server, &servers) {
                Ok(config) => servers.push(config),
                Err(problem) => problems.push(problem),
            }
        }
        if servers.is_empty() {
            let mut builtin = crate::engine::builtin_server(self.config.timeout)
                .map_err(|f| invalid(f.message.unwrap_or_default()))?;
            // Its files are the session's: it reads under the editor's project.
            if let Transport::Stdio { cwd: dir, .. } = &mut builtin.transport {
                *dir = Some(cwd.to_path_buf());
            }
            servers.push(builtin);
        }
        let mut engine = start(EngineStart {
            servers,
            settings: &self.config.settings,
            args: &self.config.args,
            roots: vec![Root::directory(cwd)],
            log_level: self.config.log_level,
            interactive: true,
            history,
            // The editor named these servers for this session: its first prompt sees all of
            // their tools, not only those of the servers that were quick to start.
            wait_for_all: true,
        })
        .await
        .map_err(|f| json!({"code": -32603, "message": f.message.unwrap_or_default()}))?;
        // The session's first event names its model, which the answer offers as an option.
        let model = match engine.handle.events.recv().await {
            Some(AgentEvent::SessionStarted { model, .. }) => model,
            _ => {
                return Err(json!({"code": -32603, "message": "the session ended as it started"}));
            }
        };
        let log = match &saved {
            Some((path, _)) => SessionLog::reopen(path).ok(),
            None => crate::session::sessions_dir().and_then(|dir| {
                SessionLog::create(
                    &dir,
                    &self
                        .config
                        .args
                        .model
                        .clone()
                        .unwrap_or_else(|| "local".into()),
                )
                .ok()
            }),
        };
        let id = match (&log, &saved) {
            (_, Some((_, id))) => id.clone(),
            (Some(log), None) => log.id.clone(),
            (None, None) => format!("tether-{}", self.next_id.fetch_add(1, Ordering::Relaxed)),
        };
        let session = Arc::new(AcpSession {
            id: id.clone(),
            ops: engine.handle.ops.clone(),
            pending: Mutex::new(None),
            log: log.map(Mutex::new),
            registry: engine.registry.clone(),
            catalog: engine.catalog.clone(),
            selection: engine.selection.clone(),
            mirror: Mutex::new(Mirror {
                messages: history_len,
                system_prompt: engine.options.system_prompt.clone(),
                ..Mirror::new(model.clone())
            }),
        });
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(id.clone(), session.clone());
        }
        // The editor learns the id from the answer, then hears the session's updates.
        let mode = match self.config.args.approve {
            crate::models::ApproveArg::Ask => "ask",
            crate::models::ApproveArg::Auto => "auto",
            crate::models::ApproveArg::Never => "never",
        };
        // session/load's answer names no session: the editor named it.
        let mut answer =
            json!({"modes": modes(mode), "configOptions": commands::config_options(&model)});
        if saved.is_none() {
            answer["sessionId"] = json!(id);
        }
        self.reply(reply_to, Ok(answer));
        self.update(&id, commands::available_commands());
        for problem in problems {
            self.say(&session.id, &format!("tether: {problem}"));
        }
        let pump = tokio::spawn(self.clone().pump(session, engine));
        if let Ok(mut pumps) = self.pumps.lock() {
            pumps.push(pump);
        }
        Ok(())
    }

    /// `session/load`: replays a saved session, then continues it.
    async fn load(
        self: &Arc<Self>,
        request: acp::LoadSessionRequest,
        reply_to: Value,
    ) -> Result<(), Value> {
        let id = request.session_id.0.to_string();
        let not_found = |why: String| json!({"code": -32602, "message": why});
        let dir = crate::session::sessions_dir().ok_or_else(|| {
            not_found("no data directory for sessions (set TETHER_DATA_DIR)".into())
        })?;
        let path = crate::session::find(&dir, &id).map_err(not_found)?;
        let loaded =
            crate::session::load(&path).map_err(|e| not_found(format!("session \"{id}\": {e}")))?;
        for message in &loaded.messages {
            for update in replay(message) {
                self.update(&id, update);
            }
        }
        self.open(
            &request.cwd,
            request.mcp_servers,
            Some((path, id)),
            loaded.messages,
            reply_to,
        )
        .await
    }

    async fn prompt(&self, request: acp::PromptRequest, id: Value) -> Option<Result<Value, Value>> {
        let session = match self.session(&request.session_id.0) {
            Ok(session) => session,
            Err(error) => return Some(Err(error)),
        };
        let content: Vec<InputBlock> = request.prompt.into_iter().filter_map(input_block).collect();
        // A slash command the editor was offered runs here; any other text, "/etc/hosts"
        // included, is the model's.
        if let [InputBlock::Text { text }] = content.as_slice()
            && let Some(Ok((command, rest))) = crate::slash::SlashCommand::parse(text)
            && command.in_editor()
        {
            return self.command(&session, command, rest, id).await;
        }
        if let Err(busy) = session.wait_for(Pending::Turn(id)) {
            return Some(Err(busy));
        }
        let _ = session.ops.send(Op::Prompt { content });
        None
    }

    fn set_mode(&self, session: &str, mode: &str) -> Result<Value, Value> {
        let session = self.session(session)?;
        let mode: ApprovalMode = serde_json::from_value(Value::String(mode.to_string())).map_err(
            |_| json!({"code": -32602, "message": format!("mode \"{mode}\" is not one of ask, auto, never")}),
        )?;
        let _ = session.ops.send(Op::SetApprovalMode { mode });
        Ok(json!({}))
    }

    /// A line of text the editor shows in the thread.
    fn say(&self, session: &str, text: &str) {
        self.update(
            session,
            json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": format!("{text}\n")}}),
        );
    }

    /// Turns a session's events into updates, requests and answers until it ends.
    async fn pump(self: Arc<Self>, session: Arc<AcpSession>, mut engine: crate::engine::Engine) {
        let id = session.id.clone();
        while let Some(event) = engine.handle.events.recv().await {
            match event {
                AgentEvent::MessageAdded { message } => {
                    session.note(|m| m.messages += 1);
                    session.save(Record::Message { message });
                }
                AgentEvent::ModelChanged { model } => self.model_changed(&session, model),
                AgentEvent::ConversationReplaced { messages, note } => {
                    self.conversation_replaced(&session, messages, note)
                }
                AgentEvent::OpRejected { message } => self.rejected(&session, message),
                AgentEvent::TurnEnded {
                    stop_reason,
                    text,
                    usage,
                    ..
                } => {
                    session.note(|m| m.usage += usage);
                    if let Some(Pending::Turn(prompt)) = session.take_pending() {
                        let outcome = match stop_reason {
                            StopReason::Error => Err(json!({"code": -32603, "message": text})),
                            reason => {
                                if matches!(
                                    reason,
                                    StopReason::MaxSteps | StopReason::RepeatedFailure
                                ) {
                                    self.say(&id, &text);
                                }
                                Ok(json!({"stopReason": stop_reason_name(reason)}))
                            }
                        };
                        self.reply(prompt, outcome);
                    }
                }
                AgentEvent::PermissionRequested {
                    request_id,
                    call_id,
                    title,
                    kind,
                    arguments,
                    options,
                    ..
                } => {
                    let options: Vec<Value> = options
                        .iter()
                        .map(|o| {
                            let kind = serde_json::to_value(o).unwrap_or_default();
                            json!({"optionId": kind, "name": o.label(), "kind": kind})
                        })
                        .collect();
                    self.ask(
                        &session,
                        request_id,
                        json!({
                        "toolCallId": call_id, "title": title, "kind": kind,
                        "status": "pending", "rawInput": arguments}),
                        options,
                    );
                }
                AgentEvent::SamplingRequested {
                    request_id,
                    call_id,
                    summary,
                    ..
                } => {
                    let options = vec![
                        json!({"optionId": "allow_once", "name": "Allow", "kind": "allow_once"}),
                        json!({"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}),
                    ];
                    let call = call_id.unwrap_or_else(|| request_id.clone());
                    self.ask(
                        &session,
                        request_id,
                        json!({"toolCallId": call, "title": summary, "kind": "other"}),
                        options,
                    );
                }
                AgentEvent::ElicitationRequested {
                    request_id,
                    server,
                    message,
                    ..
                } => {
                    // ACP v1 has no forms: the server hears a decline, the person why.
                    self.say(&id, &format!("tether: server \"{server}\" asked for input (\"{message}\"), which editors cannot show yet; declined"));
                    let _ = session.ops.send(Op::Answer {
                        request_id,
                        action: tether_agent::AnswerAction::Decline,
                        content: Map::new(),
                    });
                }
                other => {
                    if let Some(update) = update_for(other) {
                        self.update(&id, update);
                    }
                }
            }
        }
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.remove(&id);
        }
        engine.shut_down().await;
    }

    fn ask(
        &self,
        session: &Arc<AcpSession>,
        request_id: String,
        tool_call: Value,
        options: Vec<Value>,
    ) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut asked) = self.asked.lock() {
            asked.insert(id, (session.clone(), request_id));
        }
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "session/request_permission",
            "params": {"sessionId": session.id, "toolCall": tool_call, "options": options}}),
        );
    }
}

/// The modes an editor offers: Tether's approval modes.
fn modes(current: &str) -> Value {
    json!({
        "currentModeId": current,
        "availableModes": [
            {"id": "ask", "name": "Ask", "description": "Ask before tools that are not read-only"},
            {"id": "auto", "name": "Auto", "description": "Run tools without asking, except destructive ones"},
            {"id": "never", "name": "Read-only", "description": "Only read-only tools and explicitly allowed ones run"},
        ],
    })
}

fn stop_reason_name(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::Error => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::MaxSteps | StopReason::RepeatedFailure => "max_turn_requests",
        StopReason::Refusal => "refusal",
        StopReason::Cancelled => "cancelled",
    }
}

/// An editor's server as ours; names that clash with the user's config are refused.
fn server_config(server: acp::McpServer, taken: &[ServerConfig]) -> Result<ServerConfig, String> {
    let (name, mut config) = match server {
        acp::McpServer::Stdio(stdio) => {
            let mut config = ServerConfig::stdio(
                stdio.name.clone(),
                stdio.command.display().to_string(),
                stdio.args,
            );
            if let Transport::Stdio { env, .. } = &mut config.transport {
                env.extend(stdio.env.into_iter().map(|v| (v.name, v.value)));
            }
            (stdio.name, config)
        }
        acp::McpServer::Http(http) => {
            let mut config = ServerConfig::http(http.name.clone(), http.url);
            if let Transport::Http { headers, .. } = &mut config.transport {
                headers.extend(http.headers.into_iter().map(|h| (h.name, h.value)));
            }
            (http.name, config)
        }
        acp::McpServer::Sse(sse) => {
            let headers = sse.headers.into_iter().map(|h| (h.name, h.value)).collect();
            let mut config = ServerConfig::http(sse.name.clone(), sse.url.clone());
            config.transport = Transport::Sse {
                url: sse.url,
                headers,
            };
            (sse.name, config)
        }
        _ => return Err("an MCP server of a transport tether does not know was skipped".into()),
    };
    if name.is_empty() || name.contains("__") {
        return Err(format!(
            "MCP server \"{name}\" was not started: a name must be non-empty and contain no \"__\""
        ));
    }
    if taken.iter().any(|s| s.name == name) {
        return Err(format!(
            "MCP server \"{name}\" was not started: the user's config already has a server of that name"
        ));
    }
    config.name = name;
    Ok(config)
}

/// One piece of the editor's prompt as the engine's input.
fn input_block(block: acp::ContentBlock) -> Option<InputBlock> {
    Some(match block {
        acp::ContentBlock::Text(text) => InputBlock::Text { text: text.text },
        acp::ContentBlock::Image(image) => InputBlock::Image {
            data: image.data,
            mime_type: image.mime_type,
        },
        acp::ContentBlock::ResourceLink(link) => InputBlock::ResourceLink {
            uri: link.uri,
            name: Some(link.name),
        },
        acp::ContentBlock::Resource(resource) => match resource.resource {
            acp::EmbeddedResourceResource::TextResourceContents(text) => InputBlock::Resource {
                uri: text.uri,
                text: Some(text.text),
                mime_type: text.mime_type,
            },
            acp::EmbeddedResourceResource::BlobResourceContents(blob) => InputBlock::Resource {
                uri: blob.uri,
                text: None,
                mime_type: blob.mime_type,
            },
            _ => return None,
        },
        _ => return None,
    })
}

/// The update an event becomes, if the editor shows it.
fn update_for(event: AgentEvent) -> Option<Value> {
    Some(match event {
        AgentEvent::TextDelta { text } => {
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
        }
        AgentEvent::ThoughtDelta { text } => {
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}})
        }
        AgentEvent::ToolCallPending {
            id,
            title,
            kind,
            arguments,
            ..
        } => json!({"sessionUpdate": "tool_call", "toolCallId": id, "title": title,
                    "kind": kind, "status": "pending", "rawInput": arguments}),
        AgentEvent::ToolCallStarted { id, .. } => {
            json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "in_progress"})
        }
        AgentEvent::ToolCallFinished {
            id,
            is_error,
            result,
            content,
            structured_content,
            ..
        } => {
            let mut shown =
                vec![json!({"type": "content", "content": {"type": "text", "text": result}})];
            for block in &content {
                if let tether_protocol::ContentBlock::Image { data, mime_type } = block {
                    shown.push(json!({"type": "content", "content": {"type": "image", "data": data, "mimeType": mime_type}}));
                }
            }
            json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
                   "status": if is_error { "failed" } else { "completed" },
                   "content": shown,
                   "rawOutput": {"content": content, "structuredContent": structured_content}})
        }
        AgentEvent::Notice { message } => {
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("\ntether: {message}\n")}})
        }
        AgentEvent::ServerRestarted {
            server,
            restarts,
            reason,
        } => json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
            "text": format!("\ntether: {}\n", AgentEvent::restart_line(&server, restarts, &reason))}}),
        _ => return None,
    })
}

/// The updates that show a saved message again (`session/load`).
fn replay(message: &Message) -> Vec<Value> {
    match message {
        Message::System { .. } => Vec::new(),
        Message::User { content } => {
            vec![
                json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": content}}),
            ]
        }
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut updates = Vec::new();
            if !content.is_empty() {
                updates.push(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": content}}));
            }
            for call in tool_calls {
                let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                updates.push(
                    json!({"sessionUpdate": "tool_call", "toolCallId": call.id, "title": call.name,
                    "kind": "other", "status": "pending", "rawInput": arguments}),
                );
            }
            updates
        }
        Message::Tool {
            tool_call_id,
            content,
            is_error,
            ..
        } => vec![
            json!({"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id,
            "status": if *is_error { "failed" } else { "completed" },
            "content": [{"type": "content", "content": {"type": "text", "text": content}}]}),
        ],
    }
}
