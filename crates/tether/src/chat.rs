//! `tether chat`: the conversation people work in, on one engine session (`engine.rs`) for
//! its whole life. The chat is a renderer and an input source: a line becomes a prompt op, a
//! slash command becomes an op (`/model`, `/approve`, `/system`, `/clear`, `/compact`,
//! `/resume`) or a look at the servers the session shares (`/tools`, `/servers`,
//! `/resources`); the session's events are shown as they come, its questions asked on the
//! terminal and answered with ops. A line editor gives history across runs and completion
//! (slash commands, servers, tools, prompts, `@server:uri`); a session file records every
//! message as it happens (see `session`). Over a pipe it reads plain lines and prints no
//! prompts.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustyline::Editor;
use serde_json::Map;
use tether_agent::{AgentEvent, ApprovalMode, InputBlock, Op, StopReason};
use tether_mcp::{HostHandler, ServerConfig};
use tether_protocol::chat::{Message, Usage};
use tokio_util::sync::CancellationToken;

use tether_agent::Settings;

use crate::Failure;
use crate::approver::TerminalAnswers;
use crate::chat_input::{Catalog, ChatHelper, Input, Line, expand_prompt, history_path};
use crate::engine::{Engine, start_in_terminal};
use crate::host::{PromptPrinter, TerminalHost};
use crate::models::ModelArgs;
use crate::session::{self, Record, SessionLog};
use crate::sessions::{session_line, show_transcript, turns};
use crate::slash::{
    SlashCommand, help_text, prompts_text, resources_text, servers_text, tools_text, usage_text,
};
use crate::terminal_view::{EventView, Style};

mod history;

/// The running chat: its engine session, what it mirrors of the session's state for the
/// commands that show it, and the session file.
struct Chat {
    engine: Engine,
    /// The model spec in use.
    model: String,
    /// The system prompt set with `/system`, or the configured one.
    system_prompt: Option<String>,
    /// The session's conversation as its events built it (`/result`, `/export`, `/usage`).
    conversation: Vec<Message>,
    usage: Usage,
    log: Option<Arc<Mutex<SessionLog>>>,
    interactive: bool,
    /// Asks the session's questions on the terminal; its "always" answers last the chat.
    answers: TerminalAnswers,
    /// Prints a server's notices above the line being edited, between turns.
    printer: Option<PromptPrinter>,
    /// Cancelled by Ctrl-C; replaced for each turn.
    current: Arc<Mutex<CancellationToken>>,
}

/// How a replaced conversation goes into the session file.
enum Logged {
    /// Not at all: the file already holds it (a resumed session's own file).
    Already,
    /// These messages are added after what the file holds.
    Appended(Vec<Message>),
    /// From scratch: the file's conversation is cleared and written again.
    Whole,
}

/// `tether chat [--resume [ID]]`.
pub async fn chat(
    servers: Vec<ServerConfig>,
    settings: Settings,
    args: ModelArgs,
    host: TerminalHost,
    resume: Option<Option<String>>,
    config_file: Option<std::path::PathBuf>,
) -> Result<(), Failure> {
    let interactive = host.interactive;
    let mut engine = start_in_terminal(servers, &settings, &args, &host, interactive).await?;
    // The session's first event names its model and tools.
    let (model, tools) = match engine.handle.events.recv().await {
        Some(AgentEvent::SessionStarted { model, tools, .. }) => (model, tools),
        _ => return Err(Failure::partial("the session ended as it started")),
    };
    let current = Arc::new(Mutex::new(CancellationToken::new()));
    crate::engine::watch_ctrl_c(current.clone());
    let mut chat = Chat {
        model,
        system_prompt: engine.options.system_prompt.clone(),
        engine,
        conversation: Vec::new(),
        usage: Usage::default(),
        log: None,
        interactive,
        answers: TerminalAnswers::remembering_in(
            config_file.or_else(tether_mcp::config::user_config_path),
        ),
        printer: None,
        current,
    };
    let outcome = chat.main_loop(resume, tools).await;
    chat.forget_if_empty();
    let _ = chat.engine.handle.ops.send(Op::Shutdown);
    // What the session still had to say (a server's last notice) is shown before it ends.
    while let Some(event) = chat.engine.handle.events.recv().await {
        chat.idle_event(event);
    }
    chat.engine.shut_down().await;
    outcome
}

impl Chat {
    async fn main_loop(
        &mut self,
        resume: Option<Option<String>>,
        tools: usize,
    ) -> Result<(), Failure> {
        match resume {
            Some(id) => self.resume(id.as_deref()).await.map_err(Failure::usage)?,
            None => self.new_session(),
        }
        let catalog =
            Catalog::gather(&*self.engine.registry.read().await, &self.engine.catalog).await;
        let mut input = if self.interactive {
            let config = rustyline::Config::builder().auto_add_history(false).build();
            match Editor::with_config(config) {
                Ok(mut editor) => {
                    editor.set_helper(Some(ChatHelper { catalog }));
                    if let Ok(printer) = editor.create_external_printer() {
                        self.printer = Some(Box::new(printer));
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
            let mode = self
                .engine
                .selection
                .effective_mode(&self.engine.catalog.snapshot());
            safe_eprintln!(
                "tether chat with {} and {tools} tools ({} mode); /help for commands, Ctrl-C cancels an answer, Ctrl-D leaves",
                self.model,
                mode.as_str()
            );
        }
        loop {
            let (next, line) = self.read(input).await;
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
            match SlashCommand::parse(trimmed) {
                None => self.turn(trimmed.to_string()).await,
                Some(Err(message)) => safe_eprintln!("error: {message}"),
                Some(Ok((command, rest))) => match self.command(command, rest).await {
                    Ok(Step::Continue) => {}
                    Ok(Step::Quit) => break,
                    Ok(Step::Send(messages)) => self.send_messages(messages).await,
                    Err(message) => safe_eprintln!("error: {message}"),
                },
            }
        }
        Ok(())
    }

    /// Reads the next line, showing what the session says meanwhile (a server's log line).
    async fn read(&mut self, input: Input) -> (Input, Line) {
        let read = input.read("you> ");
        tokio::pin!(read);
        loop {
            tokio::select! {
                outcome = &mut read => return outcome,
                Some(event) = self.engine.handle.events.recv() => self.idle_event(event),
            }
        }
    }

    /// An event between turns: a notice above the prompt; a server's question, which no
    /// turn is waiting on, refused so the server does not wait.
    fn idle_event(&mut self, event: AgentEvent) {
        if let Some(line) = event.notice_line() {
            return self.print_idle(&line);
        }
        let line = match event {
            AgentEvent::MessageAdded { message } => {
                self.record(message);
                return;
            }
            AgentEvent::SamplingRequested {
                request_id, server, ..
            } => {
                let _ = self.engine.handle.ops.send(Op::Decide {
                    request_id,
                    decision: tether_agent::PermissionDecision::RejectOnce,
                });
                format!("server \"{server}\" asked to use the model between turns; refused")
            }
            AgentEvent::ElicitationRequested {
                request_id, server, ..
            } => {
                let _ = self.engine.handle.ops.send(Op::Answer {
                    request_id,
                    action: tether_agent::AnswerAction::Decline,
                    content: Map::new(),
                });
                format!("server \"{server}\" asked for input between turns; declined")
            }
            AgentEvent::OpRejected { message } => format!("error: {message}"),
            _ => return,
        };
        self.print_idle(&line);
    }

    /// A line between turns: above the line being edited, or on stderr.
    fn print_idle(&mut self, line: &str) {
        let line = crate::render::terminal_safe(line).into_owned();
        if let Some(printer) = self.printer.as_mut()
            && printer.print(format!("{line}\n")).is_ok()
        {
            return;
        }
        safe_eprintln!("{line}");
    }

    /// A message the session added: mirrored, and saved.
    fn record(&mut self, message: Message) {
        self.save(Record::Message {
            message: message.clone(),
        });
        self.conversation.push(message);
    }

    fn new_session(&mut self) {
        match session::sessions_dir().map(|dir| SessionLog::create(&dir, &self.model)) {
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

    /// Continues saved session `id` (the latest when `None`): its messages become the
    /// session's conversation and its file this chat's.
    async fn resume(&mut self, id: Option<&str>) -> Result<(), String> {
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
        self.replace_conversation(loaded.messages.clone(), Logged::Already)
            .await?;

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
        self.usage = loaded.usage;
        self.log = Some(Arc::new(Mutex::new(log)));
        // The servers this session added with `/add` come back with it (its file has them).
        let running: Vec<String> = {
            let registry = self.engine.registry.read().await;
            registry
                .entries()
                .iter()
                .map(|e| e.name().to_string())
                .collect()
        };
        for (name, spec) in &loaded.servers {
            if !running.contains(name) {
                self.add_server(spec, false).await;
            }
        }
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

    /// Sends `op` and waits for the event that answers it (a replaced conversation, a
    /// changed model), showing what comes meanwhile; `Err` when the session refused it.
    async fn ask_session(&mut self, op: Op) -> Result<AgentEvent, String> {
        let _ = self.engine.handle.ops.send(op);
        loop {
            match self.engine.handle.events.recv().await {
                None => return Err("the session has ended".into()),
                Some(AgentEvent::OpRejected { message }) => return Err(message),
                Some(
                    event @ (AgentEvent::ConversationReplaced { .. }
                    | AgentEvent::ModelChanged { .. }),
                ) => return Ok(event),
                Some(event) => self.idle_event(event),
            }
        }
    }

    /// Makes `messages` the session's conversation; the file learns of it as `logged` says.
    /// Returns the session's note.
    async fn replace_conversation(
        &mut self,
        messages: Vec<Message>,
        logged: Logged,
    ) -> Result<String, String> {
        let op = Op::ReplaceConversation { messages };
        self.take_conversation(op, logged).await
    }

    /// Sends `op`, which replaces the conversation, and mirrors and saves the outcome.
    async fn take_conversation(&mut self, op: Op, logged: Logged) -> Result<String, String> {
        let AgentEvent::ConversationReplaced { messages, note } = self.ask_session(op).await?
        else {
            return Err("the session answered with something else".into());
        };
        match logged {
            Logged::Already => {}
            Logged::Appended(added) => {
                for message in added {
                    self.save(Record::Message { message });
                }
            }
            Logged::Whole => {
                self.save(Record::Clear);
                for message in &messages {
                    self.save(Record::Message {
                        message: message.clone(),
                    });
                }
            }
        }
        self.conversation = messages;
        Ok(note)
    }

    /// `/prompt`'s messages: all but a last user message join the conversation; that one
    /// starts a turn.
    async fn send_messages(&mut self, mut messages: Vec<Message>) {
        let last = match messages.last() {
            Some(Message::User { content }) => Some(content.clone()),
            _ => None,
        };
        if last.is_some() {
            messages.pop();
        }
        if !messages.is_empty() {
            let mut whole = self.conversation.clone();
            whole.extend(messages.iter().cloned());
            if let Err(error) = self
                .replace_conversation(whole, Logged::Appended(messages))
                .await
            {
                safe_eprintln!("error: {error}");
                return;
            }
        }
        if let Some(text) = last {
            self.turn(text).await;
        }
    }

    /// One turn: the prompt op, then the session's events shown (and its questions asked)
    /// until the turn ends. Ctrl-C interrupts it.
    async fn turn(&mut self, text: String) {
        let cancel = CancellationToken::new();
        if let Ok(mut slot) = self.current.lock() {
            *slot = cancel.clone();
        }
        let _ = self.engine.handle.ops.send(Op::Prompt {
            content: vec![InputBlock::Text { text }],
        });
        let terminal_out = std::io::stdout().is_terminal();
        let style = Style {
            markdown: (self.interactive && terminal_out)
                .then(|| std::env::var_os("NO_COLOR").is_none()),
            spinner: self.interactive,
        };
        let mut view = EventView::new(None, style);
        let mut spinner = crate::terminal_view::Spinner::new(style.spinner);
        let started = Instant::now();
        let mut interrupted = false;
        let ended = loop {
            let event = tokio::select! {
                event = self.engine.handle.events.recv() => event,
                () = cancel.cancelled(), if !interrupted => {
                    interrupted = true;
                    let _ = self.engine.handle.ops.send(Op::Interrupt);
                    continue;
                }
                () = spinner.tick() => continue,
            };
            let Some(event) = event else {
                break None;
            };
            if !matches!(
                event,
                AgentEvent::TurnStarted { .. } | AgentEvent::MessageAdded { .. }
            ) {
                spinner.stop();
            }
            match event {
                AgentEvent::TurnEnded {
                    stop_reason,
                    text,
                    usage,
                    ..
                } => break Some((stop_reason, text, usage)),
                AgentEvent::MessageAdded { message } => self.record(message),
                AgentEvent::PermissionRequested { .. }
                | AgentEvent::ElicitationRequested { .. }
                | AgentEvent::SamplingRequested { .. } => {
                    view.flush_markdown();
                    tokio::select! {
                        op = self.answers.answer(&event) => {
                            if let Some(op) = op {
                                let _ = self.engine.handle.ops.send(op);
                            }
                        }
                        () = cancel.cancelled(), if !interrupted => {
                            interrupted = true;
                            let _ = self.engine.handle.ops.send(Op::Interrupt);
                        }
                    }
                }
                AgentEvent::OpRejected { message } => safe_eprintln!("error: {message}"),
                event => view.show(event),
            }
        };
        spinner.stop();
        view.finish_bars();
        view.flush_markdown();
        let Some((reason, text, usage)) = ended else {
            safe_eprintln!("\nerror: the session ended during the turn");
            return;
        };
        let status = match reason {
            StopReason::EndTurn | StopReason::MaxTokens | StopReason::Refusal => "complete",
            StopReason::MaxSteps | StopReason::RepeatedFailure => "stopped",
            StopReason::Cancelled => "cancelled",
            StopReason::Error => "failed",
        };
        self.usage += usage;
        self.save(Record::Turn {
            status: status.into(),
            usage,
        });
        match reason {
            StopReason::EndTurn | StopReason::MaxTokens | StopReason::Refusal => {
                safe_println!();
                if self.interactive {
                    safe_eprintln!(
                        "({} in, {} out tokens; {:.1}s)",
                        usage.input_tokens,
                        usage.output_tokens,
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            StopReason::MaxSteps | StopReason::RepeatedFailure => safe_eprintln!("\n{text}"),
            StopReason::Cancelled => safe_eprintln!("\n(cancelled)"),
            StopReason::Error => safe_eprintln!("\nerror: {text}"),
        }
    }

    /// Brings the tool catalogue up to date with the servers now, so `/tools` and the next
    /// request agree with what `/add` or `/remove` did.
    async fn refresh_tools(&self) {
        let registry = self.engine.registry.read().await;
        if let Some(refresh) = self.engine.catalog.refresh(&registry).await {
            for error in refresh.errors {
                safe_eprintln!("warning: {error}");
            }
        }
    }

    async fn command(&mut self, command: SlashCommand, rest: &str) -> Result<Step, String> {
        match command {
            SlashCommand::Quit => return Ok(Step::Quit),
            SlashCommand::Help => {
                safe_print!("{}", help_text(|_| true));
                safe_println!(
                    "  @server:uri in a message attaches that resource; a line ending in \\ continues"
                );
            }
            SlashCommand::Tools => safe_print!(
                "{}",
                tools_text(&self.engine.catalog, self.engine.selection.as_ref(), rest)
            ),
            SlashCommand::Servers => {
                safe_print!("{}", servers_text(&*self.engine.registry.read().await))
            }
            SlashCommand::Add => self.add_server(rest, true).await,
            SlashCommand::Remove => {
                let outcome = self.engine.registry.write().await.remove(rest).await;
                match outcome {
                    Ok(()) => {
                        safe_println!("  {rest}: stopped; its tools are gone");
                        self.save(Record::ServerRemoved {
                            name: rest.to_string(),
                        });
                    }
                    Err(error) => safe_eprintln!("error: {error}"),
                }
                self.refresh_tools().await;
            }
            SlashCommand::Reconnect => {
                let registry = self.engine.registry.read().await;
                let chosen: Vec<_> = registry
                    .connections()
                    .filter(|c| rest.is_empty() || c.name() == rest)
                    .collect();
                if chosen.is_empty() {
                    match registry.connection(rest) {
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
            SlashCommand::Resources => {
                safe_print!(
                    "{}",
                    resources_text(&*self.engine.registry.read().await).await
                )
            }
            SlashCommand::Prompts => {
                safe_print!(
                    "{}",
                    prompts_text(&*self.engine.registry.read().await).await
                )
            }
            SlashCommand::Prompt => {
                let registry = self.engine.registry.read().await;
                return expand_prompt(&registry, rest).await.map(Step::Send);
            }
            SlashCommand::Model if rest.is_empty() => safe_println!("model: {}", self.model),
            SlashCommand::Model => {
                let op = Op::SetModel {
                    model: rest.to_string(),
                };
                if let AgentEvent::ModelChanged { model } = self.ask_session(op).await? {
                    self.save(Record::Model {
                        model: model.clone(),
                    });
                    safe_println!("model: {model}");
                    self.model = model;
                }
            }
            SlashCommand::Approve => {
                let mode = match rest {
                    "ask" => ApprovalMode::Ask,
                    "auto" => ApprovalMode::Auto,
                    "never" => ApprovalMode::Never,
                    other => return Err(format!("/approve {other}: use ask, auto or never")),
                };
                let _ = self.engine.handle.ops.send(Op::SetApprovalMode { mode });
                safe_println!("approval: {rest}");
            }
            SlashCommand::System if rest.is_empty() => {
                safe_println!("{}", self.system_prompt.as_deref().unwrap_or("(none)"))
            }
            SlashCommand::System => {
                self.system_prompt = Some(rest.to_string());
                let _ = self.engine.handle.ops.send(Op::SetSystemPrompt {
                    text: self.system_prompt.clone(),
                });
                safe_println!("system prompt set");
            }
            SlashCommand::Root => {
                let dir = std::path::absolute(rest).map_err(|e| format!("/root {rest}: {e}"))?;
                let root = tether_mcp::Root::directory(&dir);
                let mut roots = self.engine.host.roots();
                if roots.contains(&root) {
                    safe_println!("{} is already a root", dir.display());
                    return Ok(Step::Continue);
                }
                roots.push(root);
                self.engine.host.set_roots(roots);
                for error in self.engine.registry.read().await.roots_changed().await {
                    safe_eprintln!("warning: {error}");
                }
                safe_println!("added root {}", dir.display());
            }
            SlashCommand::Result => self.show_result(rest)?,
            SlashCommand::Clear => {
                let note = self.take_conversation(Op::Clear, Logged::Whole).await?;
                safe_println!("{note}");
            }
            SlashCommand::Compact => {
                let note = self.take_conversation(Op::Compact, Logged::Whole).await?;
                safe_eprintln!("{note}");
            }
            SlashCommand::Usage => {
                safe_println!("{}", usage_text(self.usage, self.conversation.len()))
            }
            SlashCommand::Save => {
                if rest.is_empty() {
                    return Err("/save NAME".into());
                }
                self.save(Record::Name {
                    name: rest.to_string(),
                });
                safe_println!("session named \"{rest}\"");
            }
            SlashCommand::Sessions => {
                let dir = session::sessions_dir().ok_or("no data dir")?;
                for loaded in session::list(&dir).iter().take(20) {
                    safe_println!("  {}", session_line(loaded));
                }
            }
            SlashCommand::Resume => self.resume(Some(rest)).await?,
            SlashCommand::Export => self.export(rest)?,
        }
        Ok(Step::Continue)
    }

    /// `/add`: starts another server beside the others, between turns; `record` saves it in
    /// the session file, for `--resume`.
    async fn add_server(&mut self, spec: &str, record: bool) {
        if spec.is_empty() {
            safe_eprintln!("usage: /add [NAME=]COMMAND [ARGS…] or /add [NAME=]https://URL");
            return;
        }
        let mut registry = self.engine.registry.write().await;
        let taken: Vec<String> = registry
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
        let host: Arc<dyn HostHandler> = self.engine.host.clone();
        match config {
            Err(error) => safe_eprintln!("error: {error}"),
            Ok(config) => {
                let name = config.name.clone();
                match registry.add(config, host).await {
                    Ok(connection) => {
                        safe_println!("  {}: connected", connection.name());
                        // Named, so a resumed chat starts the same server under the same name.
                        let command = spec.split_once('=').filter(|(n, _)| *n == name);
                        let spec = match command {
                            Some(_) => spec.to_string(),
                            None => format!("{name}={spec}"),
                        };
                        if record {
                            self.save(Record::ServerAdded { name, spec });
                        }
                    }
                    Err(error) => safe_eprintln!("error: {error}"),
                }
            }
        }
        drop(registry);
        self.refresh_tools().await;
    }
}

/// What a slash command asks the loop to do next.
enum Step {
    Continue,
    Quit,
    Send(Vec<Message>),
}
