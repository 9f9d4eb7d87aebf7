//! `tether chat`: the conversation people work in. A line editor with history across runs
//! and completion (slash commands, servers, tools, prompts, `@server:uri`), slash commands,
//! and a session file that records every message as it happens (see `session`). Over a pipe
//! it reads plain lines and prints no prompts.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustyline::Editor;
use serde_json::{Map, Value};
use tether_agent::{
    Agent, AgentError, ApprovalMode, Approver, NonInteractive, TurnOutcome, attach_resources,
};
use tether_catalog::{SelectionMode, ToolCatalog, ToolSelection, selection_for};
use tether_llm::Provider;
use tether_mcp::{ServerConfig, ServerRegistry};
use tether_protocol::chat::{Message, Usage};
use tokio_util::sync::CancellationToken;

use crate::Failure;
use crate::approver::TerminalApprover;
use crate::chat_input::{
    COMMANDS, Catalog, ChatHelper, Input, Line, closest_command, expand_prompt, history_path,
};
use crate::host::TerminalHost;
use crate::models::{ModelArgs, Setup, build_provider, setup};
use crate::session::{self, Loaded, Record, SessionLog};
use crate::sessions::{session_line, show_transcript, turns};
use crate::terminal_view::{Style, clip, spawn_styled_renderer};

/// The running chat: model, servers, conversation, and the session file.
struct Chat<'a> {
    provider: Arc<dyn Provider>,
    spec: String,
    options: tether_agent::AgentOptions,
    /// Mutable for `/add` and `/remove`; every turn borrows it.
    registry: &'a mut ServerRegistry,
    /// Shared with every turn, so a `tools/list_changed` seen in one turn is seen by all later
    /// ones.
    tools: ToolCatalog,
    /// Which tools each request offers; search mode's loaded tools last the whole chat.
    selection: Arc<dyn ToolSelection>,
    host: Arc<TerminalHost>,
    conversation: Vec<Message>,
    usage: Usage,
    log: Option<Arc<Mutex<SessionLog>>>,
    interactive: bool,
    args: ModelArgs,
    settings: Map<String, Value>,
    /// Asks about tool calls; its "always" answers last the whole chat.
    approver: TerminalApprover,
}

/// `tether chat [--resume [ID]]`.
pub async fn chat(
    servers: Vec<ServerConfig>,
    settings: Map<String, Value>,
    args: ModelArgs,
    mut host: TerminalHost,
    resume: Option<Option<String>>,
    config_file: Option<std::path::PathBuf>,
) -> Result<(), Failure> {
    let Setup {
        provider,
        options,
        spec,
        selection,
    } = setup(&args, &settings).await?;
    let semantic = crate::semantic::enabled(&settings)?;
    let provider: Arc<dyn Provider> = Arc::from(provider);
    host.provider = Some(provider.clone());
    let interactive = host.interactive;
    let host = Arc::new(host);
    let mut registry = ServerRegistry::start_settling(servers, host.clone()).await;
    for failure in registry.failures() {
        safe_eprintln!("warning: {failure}");
    }
    let (tools, errors) = ToolCatalog::load(&registry).await;
    for error in errors {
        safe_eprintln!("warning: {error}");
    }
    // Only a catalogue that will be searched needs the encoder (and its download). The embedded
    // model is not offered `search_tools` and pre-selects lexically: semantic ranking always
    // fills its three places with look-alike tools, which cost the 135M model 14 points on the
    // accuracy bench (docs/decisions.md).
    let searches = selection.search_tool
        && selection_for(&selection).effective_mode(&tools.snapshot()) != SelectionMode::All;
    if let Some(warning) = crate::semantic::attach(&tools, semantic && searches).await {
        safe_eprintln!("warning: {warning}");
    }
    for line in crate::run::pin_tools(&tools, &registry) {
        safe_eprintln!("note: {}", crate::render::terminal_safe(&line));
    }
    let mut chat = Chat {
        provider,
        spec,
        options,
        registry: &mut registry,
        tools,
        selection: selection_for(&selection),
        host,
        conversation: Vec::new(),
        usage: Usage::default(),
        log: None,
        interactive,
        args,
        settings,
        approver: TerminalApprover::remembering_in(
            config_file.or_else(tether_mcp::config::user_config_path),
        ),
    };
    let outcome = chat.main_loop(resume).await;
    chat.forget_if_empty();
    registry.shutdown().await;
    outcome
}

impl Chat<'_> {
    async fn main_loop(&mut self, resume: Option<Option<String>>) -> Result<(), Failure> {
        match resume {
            Some(id) => self.resume(id.as_deref()).map_err(Failure::usage)?,
            None => self.new_session(),
        }
        let catalog = Catalog::gather(self.registry, &self.tools).await;
        let mut input = if self.interactive {
            let config = rustyline::Config::builder().auto_add_history(false).build();
            match Editor::with_config(config) {
                Ok(mut editor) => {
                    editor.set_helper(Some(ChatHelper { catalog }));
                    if let Ok(printer) = editor.create_external_printer()
                        && let Ok(mut slot) = self.host.printer.lock()
                    {
                        *slot = Some(Box::new(printer));
                    }
                    let history = history_path();
                    if let Some(path) = &history {
                        if let Some(dir) = path.parent() {
                            let _ = std::fs::create_dir_all(dir);
                        }
                        let _ = editor.load_history(path);
                    }
                    Input::Editor(Box::new(editor), history)
                }
                Err(_) => Input::Pipe,
            }
        } else {
            Input::Pipe
        };
        if self.interactive {
            safe_eprintln!(
                "tether chat with {} and {} tools ({} mode); /help for commands, Ctrl-C cancels an answer, Ctrl-D leaves",
                self.provider.name(),
                self.tools.snapshot().tools().len(),
                self.selection
                    .effective_mode(&self.tools.snapshot())
                    .as_str()
            );
        }
        let current = Arc::new(Mutex::new(CancellationToken::new()));
        crate::run::watch_ctrl_c(current.clone());
        loop {
            let (next, line) = input.read("you> ").await;
            input = next;
            let line = match line {
                Line::Text(line) => line,
                Line::Interrupted => continue,
                Line::End => break,
            };
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            if trimmed.starts_with('/') {
                match self.command(trimmed).await {
                    Ok(Step::Continue) => continue,
                    Ok(Step::Quit) => break,
                    Ok(Step::Send(messages)) => {
                        self.turn(messages, &current).await;
                        continue;
                    }
                    Err(message) => {
                        safe_eprintln!("error: {message}");
                        continue;
                    }
                }
            }
            match attach_resources(self.registry, trimmed).await {
                Ok((text, _)) => self.turn(vec![Message::user(text)], &current).await,
                Err(error) => safe_eprintln!("error: {error}"),
            }
        }
        Ok(())
    }

    fn new_session(&mut self) {
        match session::sessions_dir().map(|dir| SessionLog::create(&dir, &self.spec)) {
            Some(Ok(log)) => {
                if self.interactive {
                    safe_eprintln!("session {} ({})", log.id, log.path().display());
                }
                self.log = Some(Arc::new(Mutex::new(log)));
            }
            Some(Err(error)) => safe_eprintln!("warning: this chat is not saved: {error}"),
            None => {
                safe_eprintln!("warning: this chat is not saved: no data dir; set TETHER_DATA_DIR")
            }
        }
    }

    fn resume(&mut self, id: Option<&str>) -> Result<(), String> {
        let dir = session::sessions_dir().ok_or("no data dir for sessions; set TETHER_DATA_DIR")?;
        let path = match id {
            Some(id) => session::find(&dir, id)?,
            None => {
                let latest = session::list(&dir)
                    .into_iter()
                    .next()
                    .ok_or_else(|| format!("no saved sessions in {}", dir.display()))?;
                dir.join(format!("{}.jsonl", latest.id))
            }
        };
        let loaded = session::load(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut log = SessionLog::reopen(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        show_transcript(&loaded);
        if loaded.interrupted {
            safe_eprintln!(
                "(the last turn was interrupted: Tether stopped during it; its messages are kept and unfinished tool calls are marked as interrupted)"
            );
            let _ = log.append(&Record::Turn {
                status: "interrupted".into(),
                usage: Usage::default(),
            });
        }
        safe_eprintln!(
            "resumed session {} ({}{})",
            loaded.id,
            turns(loaded.turns),
            if loaded.interrupted {
                ", the last one interrupted"
            } else {
                ""
            }
        );
        self.conversation = loaded.messages;
        self.usage = loaded.usage;
        self.log = Some(Arc::new(Mutex::new(log)));
        Ok(())
    }

    /// Deletes the session file of a chat that never had a message: it would only crowd the
    /// list of sessions and `--resume`.
    fn forget_if_empty(&mut self) {
        let Some(log) = self.log.take() else {
            return;
        };
        let Ok(log) = log.lock() else {
            return;
        };
        let path = log.path().to_path_buf();
        if session::load(&path).is_ok_and(|loaded| loaded.messages.is_empty() && loaded.turns == 0)
        {
            let _ = std::fs::remove_file(&path);
        }
    }

    fn save(&self, record: Record) {
        if let Some(log) = &self.log
            && let Ok(mut log) = log.lock()
            && let Err(error) = log.append(&record)
        {
            safe_eprintln!("warning: cannot save the session: {error}");
        }
    }

    async fn turn(&mut self, messages: Vec<Message>, current: &Arc<Mutex<CancellationToken>>) {
        let answer_needed = matches!(messages.last(), Some(Message::User { .. }));
        for message in messages {
            self.save(Record::Message {
                message: message.clone(),
            });
            self.conversation.push(message);
        }
        if !answer_needed {
            return;
        }
        let cancel = CancellationToken::new();
        if let Ok(mut slot) = current.lock() {
            *slot = cancel.clone();
        }
        let approver: &dyn Approver = if self.interactive {
            &self.approver
        } else {
            &NonInteractive
        };
        let mut agent = Agent::new(
            self.provider.as_ref(),
            self.registry,
            self.tools.clone(),
            self.selection.clone(),
            approver,
            self.options.clone(),
        );
        let terminal_out = std::io::stdout().is_terminal();
        let style = Style {
            markdown: (self.interactive && terminal_out)
                .then(|| std::env::var_os("NO_COLOR").is_none()),
            spinner: self.interactive,
        };
        let (events, renderer) = spawn_styled_renderer(self.log.clone(), style);
        if let Ok(mut slot) = self.host.events.lock() {
            *slot = Some(events.clone());
        }
        let started = Instant::now();
        let outcome = agent
            .run_turn(&mut self.conversation, &events, &cancel)
            .await;
        if let Ok(mut slot) = self.host.events.lock() {
            slot.take();
        }
        drop(events);
        let _ = renderer.await;
        // A turn cancelled during tool calls leaves calls without results; the next request
        // would carry them and providers refuse that. Each gets a result saying it was
        // cancelled, saved before the turn ends so the session file reads the same.
        if outcome.is_err() {
            let added = tether_agent::answer_calls_left_open(
                &mut self.conversation,
                "Error: cancelled: the user stopped this call before it finished; its outcome is unknown",
            );
            for message in added {
                self.save(Record::Message { message });
            }
        }
        let (status, usage) = match &outcome {
            Ok(TurnOutcome {
                stopped: Some(_),
                usage,
                ..
            }) => ("stopped", *usage),
            Ok(outcome) => ("complete", outcome.usage),
            Err(AgentError::Cancelled) => ("cancelled", Usage::default()),
            Err(AgentError::Model(_)) => ("failed", Usage::default()),
        };
        self.usage += usage;
        self.save(Record::Turn {
            status: status.into(),
            usage,
        });
        match outcome {
            Ok(outcome) => {
                match outcome.stopped {
                    Some(reason) => safe_eprintln!("\n{reason}"),
                    None => safe_println!(),
                }
                if self.interactive {
                    safe_eprintln!(
                        "({} in, {} out tokens; {:.1}s)",
                        usage.input_tokens,
                        usage.output_tokens,
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Err(AgentError::Cancelled) => safe_eprintln!("\n(cancelled)"),
            Err(AgentError::Model(error)) => safe_eprintln!("\nerror: {error}"),
        }
    }

    /// Brings the tool catalogue up to date with the registry now, so `/tools` and the next
    /// request agree with what `/add` or `/remove` did.
    async fn refresh_tools(&self) {
        if let Some(refresh) = self.tools.refresh(self.registry).await {
            for error in refresh.errors {
                safe_eprintln!("warning: {error}");
            }
        }
    }

    async fn command(&mut self, line: &str) -> Result<Step, String> {
        let (command, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        match command {
            "/quit" | "/exit" => return Ok(Step::Quit),
            "/help" => {
                for (name, help) in COMMANDS {
                    safe_println!("  {name:<11} {help}");
                }
                safe_println!(
                    "  @server:uri in a message attaches that resource; a line ending in \\ continues"
                );
            }
            "/tools" => {
                // `*` marks the tools this conversation has loaded (search mode) and those of
                // "alwaysLoad" servers: the ones the model is sent beside the search tool.
                let snapshot = self.tools.snapshot();
                let loaded = self.selection.loaded();
                let mode = self.selection.effective_mode(&snapshot);
                let searching = mode != tether_catalog::SelectionMode::All;
                for (index, tool) in snapshot.tools().iter().enumerate() {
                    if rest.is_empty() || tool.qualified_name.contains(rest) {
                        let description = tool.tool.description.as_deref().unwrap_or_default();
                        let mark = if searching
                            && (snapshot.always_loaded(index)
                                || loaded.contains(&tool.qualified_name))
                        {
                            "*"
                        } else {
                            " "
                        };
                        safe_println!(
                            " {mark}{}  {}",
                            tool.qualified_name,
                            clip(description.lines().next().unwrap_or_default(), 80)
                        );
                    }
                }
                if searching {
                    safe_println!(
                        "  ({} mode: * marks the {} tools sent to the model; the others are found by search)",
                        mode.as_str(),
                        snapshot.always_loaded_definitions().len() + loaded.len()
                    );
                }
            }
            "/servers" => {
                for entry in self.registry.entries() {
                    let state = match entry.state() {
                        tether_mcp::ServerState::Connected(c) if c.is_down() => {
                            "down (it exited or its connection closed): the next call starts it again, or /reconnect".to_string()
                        }
                        tether_mcp::ServerState::Connected(c) => format!(
                            "connected ({}, {}){}",
                            c.summary().protocol_version,
                            entry.config.endpoint(),
                            match c.restarts() {
                                0 => String::new(),
                                1 => ", restarted once".into(),
                                n => format!(", restarted {n} times"),
                            }
                        ),
                        tether_mcp::ServerState::Failed(error) => format!("failed: {error}"),
                        tether_mcp::ServerState::Disabled => "disabled".into(),
                        tether_mcp::ServerState::Starting => {
                            "starting (its tools join when it is ready)".into()
                        }
                    };
                    safe_println!("  {}: {state}", entry.name());
                }
            }
            "/add" => {
                let spec = rest.trim();
                if spec.is_empty() {
                    safe_eprintln!("usage: /add [NAME=]COMMAND [ARGS…] or /add [NAME=]https://URL");
                    return Ok(Step::Continue);
                }
                let taken: Vec<String> = self
                    .registry
                    .entries()
                    .iter()
                    .map(|e| e.name().to_string())
                    .collect();
                let one_url = !spec.contains(char::is_whitespace)
                    && (spec.contains("http://") || spec.contains("https://"));
                let config = if one_url {
                    tether_mcp::config::adhoc_url(spec, &taken)
                } else {
                    tether_mcp::config::adhoc_stdio(spec, &taken)
                };
                let host: Arc<dyn tether_mcp::HostHandler> = self.host.clone();
                match config {
                    Err(error) => safe_eprintln!("error: {error}"),
                    Ok(config) => match self.registry.add(config, host).await {
                        Ok(connection) => safe_println!("  {}: connected", connection.name()),
                        Err(error) => safe_eprintln!("error: {error}"),
                    },
                }
                self.refresh_tools().await;
            }
            "/remove" => {
                let name = rest.trim();
                match self.registry.remove(name).await {
                    Ok(()) => safe_println!("  {name}: stopped; its tools are gone"),
                    Err(error) => safe_eprintln!("error: {error}"),
                }
                self.refresh_tools().await;
            }
            "/reconnect" => {
                let named = rest.trim();
                let chosen: Vec<_> = self
                    .registry
                    .connections()
                    .filter(|c| named.is_empty() || c.name() == named)
                    .collect();
                if chosen.is_empty() {
                    match self.registry.connection(named) {
                        Err(error) => safe_eprintln!("error: {error}"),
                        Ok(_) => safe_println!("no connected servers"),
                    }
                }
                for connection in chosen {
                    match connection.reconnect().await {
                        Ok(()) => safe_println!("  {}: reconnected", connection.name()),
                        Err(error) => safe_println!("  {}: {error}", connection.name()),
                    }
                }
            }
            "/resources" => {
                for connection in self.registry.connections() {
                    for resource in connection.list_resources().await.unwrap_or_default() {
                        safe_println!("  @{}:{}", connection.name(), resource.uri);
                    }
                    for template in connection
                        .list_resource_templates()
                        .await
                        .unwrap_or_default()
                    {
                        safe_println!(
                            "  @{}:{} (template)",
                            connection.name(),
                            template.uri_template
                        );
                    }
                }
            }
            "/prompts" => {
                for connection in self.registry.connections() {
                    for prompt in connection.list_prompts().await.unwrap_or_default() {
                        let arguments: Vec<String> =
                            prompt.arguments.iter().map(|a| a.name.clone()).collect();
                        safe_println!(
                            "  /prompt {} {} {}",
                            connection.name(),
                            prompt.name,
                            arguments
                                .iter()
                                .map(|a| format!("{a}=…"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        );
                    }
                }
            }
            "/prompt" => return expand_prompt(self.registry, rest).await.map(Step::Send),
            "/model" => {
                if rest.is_empty() {
                    safe_println!("model: {}", self.provider.name());
                } else {
                    let provider = build_provider(rest, &self.args, &self.settings)
                        .await
                        .map_err(|f| f.message.unwrap_or_else(|| "cannot switch".into()))?;
                    self.provider = Arc::from(provider);
                    self.spec = rest.to_string();
                    self.options.context_window =
                        crate::models::context_window(&self.settings, self.provider.as_ref());
                    self.save(Record::Model {
                        model: rest.to_string(),
                    });
                    safe_println!("model: {}", self.provider.name());
                }
            }
            "/approve" => {
                self.options.approval_mode = match rest {
                    "ask" => ApprovalMode::Ask,
                    "auto" => ApprovalMode::Auto,
                    "never" => ApprovalMode::Never,
                    other => return Err(format!("/approve {other}: use ask, auto or never")),
                };
                safe_println!("approval: {rest}");
            }
            "/system" => {
                if rest.is_empty() {
                    safe_println!(
                        "{}",
                        self.options.system_prompt.as_deref().unwrap_or("(none)")
                    );
                } else {
                    self.options.system_prompt = Some(rest.to_string());
                    safe_println!("system prompt set");
                }
            }
            "/root" => {
                let dir = std::path::absolute(rest).map_err(|e| format!("/root {rest}: {e}"))?;
                let root = tether_mcp::Root::directory(&dir);
                if let Ok(mut roots) = self.host.roots.lock() {
                    if roots.contains(&root) {
                        safe_println!("{} is already a root", dir.display());
                        return Ok(Step::Continue);
                    }
                    roots.push(root);
                }
                for error in self.registry.roots_changed().await {
                    safe_eprintln!("warning: {error}");
                }
                safe_println!("added root {}", dir.display());
            }
            "/result" => {
                let n: usize = if rest.is_empty() {
                    1
                } else {
                    rest.parse()
                        .map_err(|_| format!("/result {rest}: give a number, 1 for the last"))?
                };
                let found = self
                    .conversation
                    .iter()
                    .rev()
                    .filter_map(|m| match m {
                        Message::Tool { name, content, .. } => Some((name, content)),
                        _ => None,
                    })
                    .nth(n.saturating_sub(1));
                match found {
                    Some((name, content)) => safe_println!(
                        "{}",
                        crate::render::terminal_safe(&format!("{name}:\n{content}"))
                    ),
                    None => return Err("no such tool result in this conversation".into()),
                }
            }
            "/clear" => {
                self.conversation.clear();
                self.save(Record::Clear);
                safe_println!("conversation cleared");
            }
            "/compact" => self.compact().await?,
            "/usage" => safe_println!(
                "{} in, {} out tokens this session ({} messages in context)",
                self.usage.input_tokens,
                self.usage.output_tokens,
                self.conversation.len()
            ),
            "/save" => {
                if rest.is_empty() {
                    return Err("/save NAME".into());
                }
                self.save(Record::Name {
                    name: rest.to_string(),
                });
                safe_println!("session named \"{rest}\"");
            }
            "/sessions" => {
                let dir = session::sessions_dir().ok_or("no data dir")?;
                for loaded in session::list(&dir).iter().take(20) {
                    safe_println!("  {}", session_line(loaded));
                }
            }
            "/resume" => {
                self.resume(Some(rest))?;
            }
            "/export" => {
                let path = std::path::Path::new(rest);
                if rest.is_empty() {
                    return Err("/export FILE.md or FILE.json".into());
                }
                // The name says the format; any other name would get Markdown it did not ask for.
                let json = match path.extension().and_then(|e| e.to_str()) {
                    Some("json") => true,
                    Some("md" | "markdown") => false,
                    _ => {
                        return Err(format!(
                            "/export {rest}: name a .md file (Markdown) or a .json file (the session's messages)"
                        ));
                    }
                };
                // The session file holds what the export needs (start time, finished turns,
                // name); it is written line by line, so it is up to date. The conversation
                // in memory is what the user sees now (after /clear or /compact).
                let saved = self
                    .log
                    .as_ref()
                    .and_then(|l| l.lock().ok().map(|l| l.path().to_path_buf()))
                    .and_then(|path| session::load(&path).ok());
                let loaded = Loaded {
                    model: self.provider.name().to_string(),
                    messages: self.conversation.clone(),
                    usage: self.usage,
                    ..saved.unwrap_or_default()
                };
                let text = if json {
                    serde_json::to_string_pretty(&session::to_json(&loaded))
                        .map_err(|e| e.to_string())?
                } else {
                    session::to_markdown(&loaded)
                };
                std::fs::write(path, text).map_err(|e| format!("/export {rest}: {e}"))?;
                safe_println!("wrote {}", path.display());
            }
            other => {
                return Err(match closest_command(other) {
                    Some(close) => {
                        format!("unknown command {other}; did you mean {close}? (/help lists them)")
                    }
                    None => format!("unknown command {other}; /help lists them"),
                });
            }
        }
        Ok(Step::Continue)
    }

    /// Replaces all but the last exchange with a summary written by the model.
    async fn compact(&mut self) -> Result<(), String> {
        let keep_from = self
            .conversation
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .unwrap_or(0);
        if keep_from == 0 {
            return Err("nothing to compact yet".into());
        }
        let earlier = session::to_markdown(&Loaded {
            messages: self.conversation[..keep_from].to_vec(),
            ..Loaded::default()
        });
        let request = tether_llm::ChatRequest {
            messages: vec![
                Message::system(
                    "Summarise this conversation for your own later use: the user's goals, facts learned from tools, decisions made, open questions. Be concise.",
                ),
                Message::user(earlier),
            ],
            max_tokens: Some(1024),
            ..Default::default()
        };
        let summary = tether_llm::complete(self.provider.as_ref(), &request)
            .await
            .map_err(|e| format!("/compact: {e}"))?;
        let kept = self.conversation.split_off(keep_from);
        let before = self.conversation.len();
        self.conversation = vec![Message::user(format!(
            "[Summary of the earlier conversation]\n{}",
            summary.text
        ))];
        self.conversation.extend(kept);
        self.save(Record::Clear);
        for message in self.conversation.clone() {
            self.save(Record::Message { message });
        }
        safe_eprintln!(
            "compacted {before} earlier messages into a summary ({} tokens)",
            summary.usage.output_tokens
        );
        Ok(())
    }
}

/// What a slash command asks the loop to do next.
enum Step {
    Continue,
    Quit,
    Send(Vec<Message>),
}
