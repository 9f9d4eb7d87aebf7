//! `tether run` and the minimal line-based `tether chat`: build the provider and the servers,
//! drive the agent loop, and render its events as text (or JSON lines). Ctrl-C cancels the
//! running turn and its tool calls, not the program.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tether_agent::results::DEFAULT_MAX_RESULT_CHARS;
use tether_agent::{
    Agent, AgentError, AgentEvent, AgentOptions, ApprovalMode, ApprovalRequest, ApprovalRules,
    Approver, NonInteractive, StopReason, ToolMode, attach_resources,
};
use tether_catalog::selection::DEFAULT_CONTEXT_WINDOW;
use tether_catalog::{SelectionMode, SelectionOptions, ToolCatalog, selection_for};
use tether_llm::{LlmError, Provider, ProviderOptions, provider_for};
use tether_mcp::{ServerConfig, ServerRegistry};
use tether_protocol::chat::Message;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Failure;
use crate::host::{TerminalHost, ask};
use crate::render::{ProgressBar, terminal_safe};
use crate::session::{Record, SessionLog};

/// Flags of `run` and `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// provider:model, e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, ollama:qwen3:4b
    /// [env: TETHER_MODEL; or "model" in the config].
    #[arg(long, value_name = "PROVIDER:MODEL")]
    pub model: Option<String>,
    /// Base URL of the provider's API (for local or proxied servers).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// How tools reach the model: native tool calling, prompt-based JSON, or auto (native,
    /// falling back to prompt when the provider rejects tools).
    #[arg(long, value_enum, default_value = "auto")]
    pub tool_mode: ToolModeArg,
    /// Most model calls per question.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub max_steps: usize,
    /// ask: ask before tools not marked read-only; auto: run them, still asking for destructive
    /// ones; never: only read-only tools and explicit allows run.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveArg,
    /// Extra system prompt, added after Tether's.
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// Which tools each request carries: all of them; search (a search_tools tool, the
    /// always-loaded tools and those found so far); meta (one mcp_query tool); auto (all while
    /// they fit in a tenth of the context window, search beyond) [config: "toolSelection"].
    #[arg(long, value_enum, value_name = "MODE")]
    pub tools: Option<ToolsArg>,
    /// Embedded model only: decode tool calls without the grammar (to measure its effect).
    #[arg(long, hide = true)]
    pub no_grammar: bool,
}

impl Default for ModelArgs {
    /// The same values as the flags' defaults (for plain `tether`, which starts a chat).
    fn default() -> ModelArgs {
        ModelArgs {
            model: None,
            base_url: None,
            tool_mode: ToolModeArg::Auto,
            max_steps: 20,
            approve: ApproveArg::Ask,
            system_prompt: None,
            tools: None,
            no_grammar: false,
        }
    }
}

/// `--tool-mode`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ToolModeArg {
    /// Native, falling back to prompt-based.
    Auto,
    /// Native tool calling only.
    Native,
    /// Tools in the system prompt, JSON replies.
    Prompt,
}

/// `--tools`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ToolsArg {
    /// Every tool on every request.
    All,
    /// Tools found by search, loaded as the conversation goes.
    Search,
    /// One mcp_query meta-tool.
    Meta,
    /// All while they fit in a tenth of the context window, search beyond.
    Auto,
}

/// `--approve`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ApproveArg {
    /// Ask before tools that are not read-only.
    Ask,
    /// Run without asking, except destructive tools.
    Auto,
    /// Never run tools that would need approval.
    Never,
}

/// Exit code of a run stopped by the step limit or repeated failures.
const EXIT_STOPPED: u8 = 4;
/// Exit code after Ctrl-C, as shells expect.
const EXIT_CANCELLED: u8 = 130;

pub(crate) struct Setup {
    pub(crate) provider: Box<dyn Provider>,
    pub(crate) options: AgentOptions,
    /// The `provider:model` it was built from.
    pub(crate) spec: String,
    /// How tools are selected for each request.
    pub(crate) selection: SelectionOptions,
}

pub(crate) async fn setup(
    args: &ModelArgs,
    settings: &Map<String, Value>,
) -> Result<Setup, Failure> {
    let spec = args
        .model
        .clone()
        .or_else(|| std::env::var("TETHER_MODEL").ok().filter(|m| !m.is_empty()))
        .or_else(|| settings.get("model").and_then(Value::as_str).map(str::to_string))
        .or_else(default_model)
        .ok_or_else(|| {
            Failure::usage(
                "no model configured; pass --model provider:model (e.g. openai:gpt-4o-mini with OPENAI_API_KEY, or ollama:qwen3:4b), set TETHER_MODEL, or add \"model\" to the config",
            )
        })?;
    let provider = build_provider(&spec, args, settings).await?;
    let approval_rules = approval_rules(settings)?;
    let selection = selection_options(args, settings, &spec, provider.as_ref())?;
    let max_result_chars = match settings.get("maxResultChars") {
        None => DEFAULT_MAX_RESULT_CHARS,
        Some(value) => value
            .as_u64()
            .filter(|n| *n >= 1_000)
            .map(|n| n as usize)
            .ok_or_else(|| {
                Failure::usage(format!(
                    "config: \"maxResultChars\" is {value}; give a whole number of characters, at least 1000 (default {DEFAULT_MAX_RESULT_CHARS})"
                ))
            })?,
    };
    let options = AgentOptions {
        max_result_chars,
        max_steps: args.max_steps.max(1),
        tool_mode: match args.tool_mode {
            ToolModeArg::Auto => ToolMode::Auto,
            ToolModeArg::Native => ToolMode::Native,
            ToolModeArg::Prompt => ToolMode::Prompt,
        },
        approval_mode: match args.approve {
            ApproveArg::Ask => ApprovalMode::Ask,
            ApproveArg::Auto => ApprovalMode::Auto,
            ApproveArg::Never => ApprovalMode::Never,
        },
        approval_rules,
        system_prompt: args.system_prompt.clone(),
        context_window: context_window(settings, provider.as_ref()),
        saved_results: crate::session::results_dir(),
        ..AgentOptions::default()
    };
    Ok(Setup {
        provider,
        options,
        spec,
        selection,
    })
}

/// `--tools`, else `"toolSelection"` in the config, else auto; tuned for the embedded model,
/// which is offered only the tools pre-selected for each question (its grammar is built over
/// them, and a 135M model does better choosing among three tools than calling a search).
pub(crate) fn selection_options(
    args: &ModelArgs,
    settings: &Map<String, Value>,
    spec: &str,
    provider: &dyn Provider,
) -> Result<SelectionOptions, Failure> {
    let mode = match (args.tools, settings.get("toolSelection")) {
        (Some(ToolsArg::All), _) => SelectionMode::All,
        (Some(ToolsArg::Search), _) => SelectionMode::Search,
        (Some(ToolsArg::Meta), _) => SelectionMode::Meta,
        (Some(ToolsArg::Auto), _) => SelectionMode::Auto,
        (None, None) => SelectionMode::Auto,
        (None, Some(value)) => value
            .as_str()
            .ok_or_else(|| format!("is {value}"))
            .and_then(SelectionMode::parse)
            .map_err(|e| Failure::usage(format!("config: \"toolSelection\": {e}")))?,
    };
    let local = spec == "local" || spec.starts_with("local:");
    Ok(SelectionOptions {
        mode,
        context_window: context_window(settings, provider).unwrap_or(DEFAULT_CONTEXT_WINDOW),
        search_tool: !local,
        preload: if local { 3 } else { 5 },
        keep_loaded: !local,
        ..SelectionOptions::default()
    })
}

/// The config's `"approval"` rules (none when absent).
pub(crate) fn approval_rules(settings: &Map<String, Value>) -> Result<ApprovalRules, Failure> {
    match settings.get("approval") {
        Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
            Failure::usage(format!(
                "config: \"approval\": {e}; expected {{\"allow\": [patterns], \"ask\": [...], \"deny\": [...]}}"
            ))
        }),
        None => Ok(ApprovalRules::default()),
    }
}

/// `"contextWindow"` in the config, else what the provider knows.
pub(crate) fn context_window(
    settings: &Map<String, Value>,
    provider: &dyn Provider,
) -> Option<usize> {
    settings
        .get("contextWindow")
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .or_else(|| provider.context_window())
}

/// The provider for `provider:model` (or `local`), with `--base-url` / `"baseUrl"` applied.
pub(crate) async fn build_provider(
    spec: &str,
    args: &ModelArgs,
    settings: &Map<String, Value>,
) -> Result<Box<dyn Provider>, Failure> {
    let base_url = args.base_url.clone().or_else(|| {
        settings
            .get("baseUrl")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    if spec == "local" || spec.starts_with("local:") {
        return local_provider(spec, args).await;
    }
    provider_for(
        spec,
        &ProviderOptions {
            base_url,
            ..ProviderOptions::default()
        },
    )
    .map_err(|e| Failure::usage(e.to_string()))
}

/// The model used when none is configured: the embedded one, when built in.
fn default_model() -> Option<String> {
    cfg!(feature = "local").then(|| "local".to_string())
}

/// Prints download progress on stderr: a live line on a terminal, quarters otherwise.
#[cfg(feature = "local")]
pub(crate) fn progress_printer(what: &'static str) -> impl Fn(u64, Option<u64>, &str) + Sync {
    let terminal = std::io::stderr().is_terminal();
    let last_quarter = std::sync::atomic::AtomicU64::new(0);
    move |done, total, source| {
        let mb = |b: u64| b as f64 / 1_000_000.0;
        let Some(total) = total.filter(|t| *t > 0) else {
            return;
        };
        let percent = done * 100 / total;
        if terminal {
            eprint!(
                "\rdownloading {what} from {source}: {percent:3}% ({:.0}/{:.0} MB)",
                mb(done),
                mb(total)
            );
            if done >= total {
                eprintln!();
            }
        } else {
            let quarter = percent / 25;
            if quarter > last_quarter.swap(quarter, std::sync::atomic::Ordering::Relaxed)
                || done == 0
            {
                eprintln!("downloading {what} from {source}: {percent}%");
            }
        }
    }
}

#[cfg(feature = "local")]
async fn local_provider(spec: &str, args: &ModelArgs) -> Result<Box<dyn Provider>, Failure> {
    use tether_local::{DEFAULT_MODEL_NAME, LocalOptions, LocalProvider, provision};
    let (path, name) = match spec.strip_prefix("local:") {
        Some(path) => (std::path::PathBuf::from(path), spec.to_string()),
        None => {
            let progress = progress_printer("the default model");
            let path = provision::ensure_default_model(&progress)
                .await
                .map_err(Failure::partial)?;
            (path, DEFAULT_MODEL_NAME.to_string())
        }
    };
    let options = LocalOptions {
        grammar: !args.no_grammar,
        ..LocalOptions::default()
    };
    let provider = tokio::task::spawn_blocking(move || LocalProvider::load(&path, name, options))
        .await
        .map_err(|e| Failure::partial(format!("loading the model failed: {e}")))?
        .map_err(|e| model_failure(&e))?;
    Ok(Box::new(provider))
}

#[cfg(not(feature = "local"))]
async fn local_provider(spec: &str, _args: &ModelArgs) -> Result<Box<dyn Provider>, Failure> {
    Err(Failure::usage(format!(
        "--model {spec}: this build has no embedded model; rebuild with the \"local\" feature or use a remote provider"
    )))
}

/// `tether model pull|path`.
pub async fn model_command(action: &str) -> Result<(), Failure> {
    #[cfg(feature = "local")]
    {
        use tether_local::provision;
        if action == "path" {
            println!(
                "{}",
                provision::model_dir()
                    .join(provision::DEFAULT_MODEL_FILE)
                    .display()
            );
            return Ok(());
        }
        let progress = progress_printer("the default model");
        let path = provision::ensure_default_model(&progress)
            .await
            .map_err(Failure::partial)?;
        println!("{}", path.display());
        let progress = progress_printer("the search encoder");
        let encoder = provision::ensure_encoder_model(&progress)
            .await
            .map_err(Failure::partial)?;
        println!("{}", encoder.display());
        Ok(())
    }
    #[cfg(not(feature = "local"))]
    {
        Err(Failure::usage(format!(
            "tether model {action}: this build has no embedded model"
        )))
    }
}

/// Asks on the terminal; only used when stdin and stderr are terminals.
#[derive(Default)]
pub(crate) struct TerminalApprover {
    /// Tools the user said "always" to, for this session.
    always: Mutex<Vec<String>>,
    /// Servers the user said "always" to, for this session.
    always_servers: Mutex<Vec<String>>,
    /// The config file where "always, and remember" answers are written.
    config_file: Option<std::path::PathBuf>,
}

impl TerminalApprover {
    /// An approver that can write lasting "always" answers into `config_file`.
    pub(crate) fn remembering_in(config_file: Option<std::path::PathBuf>) -> TerminalApprover {
        TerminalApprover {
            config_file,
            ..TerminalApprover::default()
        }
    }

    /// Adds `pattern` to the config's `approval.allow` list, keeping everything else.
    fn remember(&self, pattern: &str) -> Result<std::path::PathBuf, String> {
        let path = self
            .config_file
            .clone()
            .ok_or("no config file to write to")?;
        let mut config: Value = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let allow = config
            .as_object_mut()
            .ok_or("the config is not a JSON object")?
            .entry("approval")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or("\"approval\" is not an object")?
            .entry("allow")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or("\"approval.allow\" is not a list")?;
        if !allow.iter().any(|p| p == pattern) {
            allow.push(json!(pattern));
        }
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let text = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
        let partial = path.with_extension("json.part");
        std::fs::write(&partial, text + "\n")
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}

impl Approver for TerminalApprover {
    fn interactive(&self) -> bool {
        true
    }

    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let name = request.tool.qualified_name.clone();
            let server = request.tool.server.clone();
            let remembered = self
                .always
                .lock()
                .map(|a| a.contains(&name))
                .unwrap_or(false)
                || self
                    .always_servers
                    .lock()
                    .map(|a| a.contains(&server))
                    .unwrap_or(false);
            if remembered {
                return true;
            }
            let arguments = clip(&request.arguments.to_string(), 300);
            let hints = &request.tool.tool.annotations;
            let warning = if hints.destructive_hint == Some(true) {
                " (destructive)"
            } else {
                ""
            };
            let prompt = format!(
                "\nallow {name}{warning} {arguments}? [y]es / [n]o / [a]lways for this tool / always for [s]erver \"{server}\" / [r]emember in the config, then Enter: "
            );
            let answer = ask(prompt).await.unwrap_or_default().to_lowercase();
            match answer.as_str() {
                "y" | "yes" => true,
                "a" | "always" => {
                    if let Ok(mut always) = self.always.lock() {
                        always.push(name);
                    }
                    true
                }
                "r" | "remember" => {
                    match self.remember(&name) {
                        Ok(path) => eprintln!("(allowed {name} in {})", path.display()),
                        Err(error) => eprintln!("warning: not remembered: {error}"),
                    }
                    if let Ok(mut always) = self.always.lock() {
                        always.push(name);
                    }
                    true
                }
                "s" | "server" => {
                    if let Ok(mut always) = self.always_servers.lock() {
                        always.push(server);
                    }
                    true
                }
                _ => false,
            }
        })
    }
}

/// A tool result on one line, for the terminal: JSON compacted onto the line, other text with
/// its lines joined (`Allowed directories: /a · /b`), clipped to `max` characters with the
/// number of lines left out, if any.
pub(crate) fn one_line(result: &str, max: usize) -> String {
    let trimmed = result.trim();
    if trimmed.starts_with(['{', '['])
        && let Ok(value) = serde_json::from_str::<Value>(trimmed)
    {
        let compact = value.to_string();
        return match &value {
            Value::Array(items) if compact.chars().count() > max => {
                format!("{} items: {}", items.len(), clip(&compact, max))
            }
            _ => clip(&compact, max),
        };
    }
    let lines: Vec<&str> = trimmed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut joined = String::new();
    for line in &lines {
        if !joined.is_empty() {
            joined.push_str(if joined.ends_with(':') { " " } else { " · " });
        }
        joined.push_str(line);
    }
    clip(&joined, max)
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Prints events as they arrive: text to stdout, tool activity to stderr; or JSON lines.
/// Messages go to `session` (synced to disk) as they are added.
pub(crate) fn spawn_renderer(
    json: bool,
    session: Option<Arc<Mutex<SessionLog>>>,
) -> (
    mpsc::UnboundedSender<AgentEvent>,
    tokio::task::JoinHandle<()>,
) {
    spawn_styled_renderer(json, session, Style::default())
}

/// How the chat dresses its output in a terminal.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Style {
    /// Render answers as Markdown (`Some(colour)`), or print them as they come.
    pub(crate) markdown: Option<bool>,
    /// Show a spinner until the first event.
    pub(crate) spinner: bool,
}

/// [`spawn_renderer`] with the chat's styling.
pub(crate) fn spawn_styled_renderer(
    json: bool,
    session: Option<Arc<Mutex<SessionLog>>>,
    style: Style,
) -> (
    mpsc::UnboundedSender<AgentEvent>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<AgentEvent>();
    let handle = tokio::spawn(async move {
        let mut view = EventView {
            json,
            session,
            stdout: std::io::stdout(),
            bars: Default::default(),
            markdown: style.markdown.map(crate::markdown::MarkdownStream::new),
        };
        let mut next = if style.spinner {
            spin_until_first(&mut rx).await
        } else {
            rx.recv().await
        };
        while let Some(event) = next {
            if !json
                && matches!(
                    event,
                    AgentEvent::Notice { .. } | AgentEvent::ServerRestarted { .. }
                )
            {
                // Held while a question (an approval, a form) waits for its answer.
                let _terminal = crate::host::TERMINAL.lock().await;
                view.show(event);
            } else {
                view.show(event);
            }
            next = rx.recv().await;
        }
        view.flush_markdown();
    });
    (tx, handle)
}

/// Until the model's first event: a spinner on stderr, erased when the event comes.
async fn spin_until_first(rx: &mut mpsc::UnboundedReceiver<AgentEvent>) -> Option<AgentEvent> {
    const FRAMES: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    let mut frame = 0;
    let first = loop {
        tokio::select! {
            event = rx.recv() => break event,
            _ = tick.tick() => {
                eprint!("\r{} waiting for the model", FRAMES[frame % FRAMES.len()]);
                frame += 1;
            }
        }
    };
    eprint!("\r\x1b[2K");
    first
}

/// What one turn's events look like on the terminal (or as JSON lines), and where its
/// messages are saved.
struct EventView {
    json: bool,
    session: Option<Arc<Mutex<SessionLog>>>,
    stdout: std::io::Stdout,
    bars: std::collections::HashMap<String, ProgressBar>,
    markdown: Option<crate::markdown::MarkdownStream>,
}

impl EventView {
    /// Prints the rest of a Markdown answer held back for its line to end.
    fn flush_markdown(&mut self) {
        if let Some(md) = &mut self.markdown {
            let _ = write!(self.stdout, "{}", md.finish());
            let _ = self.stdout.flush();
        }
    }

    /// Shows (or records) one event.
    fn show(&mut self, event: AgentEvent) {
        if let AgentEvent::MessageAdded { message } = &event {
            if let Some(log) = &self.session
                && let Ok(mut log) = log.lock()
                && let Err(error) = log.append(&Record::Message {
                    message: message.clone(),
                })
            {
                eprintln!("warning: cannot save the session: {error}");
            }
            return;
        }
        if self.json {
            let _ = writeln!(
                self.stdout,
                "{}",
                serde_json::to_string(&event).unwrap_or_default()
            );
            return;
        }
        match event {
            AgentEvent::TextDelta { text } => {
                // A model can repeat what a tool returned, escape sequences included.
                let text = terminal_safe(&text).into_owned();
                let shown = match &mut self.markdown {
                    Some(md) => md.push(&text),
                    None => text,
                };
                let _ = write!(self.stdout, "{shown}");
                let _ = self.stdout.flush();
            }
            AgentEvent::ToolCallStarted {
                name, arguments, ..
            } => {
                self.flush_markdown();
                eprintln!(
                    "→ {} {}",
                    terminal_safe(&name),
                    clip(&arguments.to_string(), 200)
                );
            }
            AgentEvent::ToolProgress {
                id,
                name,
                progress,
                total,
                message,
                task,
            } => {
                self.bars
                    .entry(id)
                    .or_insert_with(|| ProgressBar::new(&name))
                    .update(&tether_mcp::Progress {
                        progress,
                        total,
                        message,
                        task,
                    });
            }
            AgentEvent::ToolCallFinished {
                id,
                name,
                is_error,
                result,
                duration_ms,
                ..
            } => {
                if let Some(mut bar) = self.bars.remove(&id) {
                    bar.finish();
                }
                let mark = if is_error { "✗" } else { "←" };
                let line = format!(
                    "{mark} {name} ({duration_ms} ms): {}",
                    one_line(&result, 200)
                );
                let line = terminal_safe(&line);
                if is_error && self.markdown.as_ref().is_some_and(|m| m.colored()) {
                    eprintln!("\x1b[31m{line}\x1b[0m");
                } else {
                    eprintln!("{line}");
                }
            }
            // The text front ends ask their questions through their own host and approver,
            // and end their turns themselves; the session's bookkeeping events are not shown.
            AgentEvent::Usage { .. }
            | AgentEvent::MessageAdded { .. }
            | AgentEvent::SessionStarted { .. }
            | AgentEvent::TurnStarted { .. }
            | AgentEvent::ThoughtDelta { .. }
            | AgentEvent::ToolCallPending { .. }
            | AgentEvent::PermissionRequested { .. }
            | AgentEvent::ElicitationRequested { .. }
            | AgentEvent::SamplingRequested { .. }
            | AgentEvent::TurnEnded { .. }
            | AgentEvent::OpRejected { .. }
            | AgentEvent::SessionEnded { .. } => {}
            AgentEvent::ToolsLoaded {
                names,
                reason,
                query,
            } => {
                self.flush_markdown();
                let line = match query {
                    Some(query) => format!("+ search \"{query}\" loaded {}", names.join(", ")),
                    None => format!("+ {reason} {}", names.join(", ")),
                };
                eprintln!("{}", terminal_safe(&line));
            }
            AgentEvent::Notice { message } => eprintln!("note: {}", terminal_safe(&message)),
            AgentEvent::ServerRestarted {
                server,
                restarts,
                reason,
            } => eprintln!(
                "note: {}",
                terminal_safe(&AgentEvent::restart_line(&server, restarts, &reason))
            ),
        }
    }
}

/// Checks every server's tools against the pin file (pinning the ones seen for the first
/// time) and turns pinning on for the rest of the run; returns the lines to show.
pub(crate) fn pin_tools(catalog: &ToolCatalog, registry: &ServerRegistry) -> Vec<String> {
    let Some(path) = crate::session::pins_path() else {
        return vec![
            "no data dir for tool pins (set TETHER_DATA_DIR); tools are not pinned".into(),
        ];
    };
    match tether_catalog::PinBook::load(&path) {
        Ok(book) => catalog
            .pin(registry, book)
            .iter()
            .flat_map(tether_catalog::PinReport::lines)
            .collect(),
        Err(error) => vec![format!("{error}; tools are not pinned in this run")],
    }
}

/// Cancels the current turn on Ctrl-C.
///
/// The handler is installed before this returns, not when a spawned task first runs: chat's
/// line editor saves the SIGINT action when a read starts and puts it back when the read ends,
/// so a handler that came in between would be replaced by the default one, and the next Ctrl-C
/// during a tool call would kill Tether instead of cancelling the turn.
pub(crate) fn watch_ctrl_c(current: Arc<Mutex<CancellationToken>>) {
    let cancel = move || {
        if let Ok(token) = current.lock() {
            token.cancel();
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut interrupts) = signal(SignalKind::interrupt()) {
            tokio::spawn(async move {
                while interrupts.recv().await.is_some() {
                    cancel();
                }
            });
            return;
        }
    }
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            cancel();
        }
    });
}

pub(crate) fn model_failure(error: &LlmError) -> Failure {
    match error {
        LlmError::Config(message) => Failure::usage(message.clone()),
        other => Failure::partial(other.to_string()),
    }
}

/// `tether run "question"`: `--json` runs on the engine's session (json_run.rs); the text
/// front end drives the loop itself.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    servers: Vec<ServerConfig>,
    settings: Map<String, Value>,
    args: ModelArgs,
    question: String,
    json: bool,
    ops_from_stdin: bool,
    mut host: TerminalHost,
    config_file: Option<std::path::PathBuf>,
) -> Result<(), Failure> {
    if json {
        return crate::json_run::run(servers, settings, args, question, host, ops_from_stdin).await;
    }
    if ops_from_stdin {
        return Err(Failure::usage(
            "--input jsonl reads ops for the JSON event stream; add --json",
        ));
    }
    let Setup {
        provider,
        options,
        selection,
        ..
    } = setup(&args, &settings).await?;
    let semantic = crate::semantic::enabled(&settings)?;
    let provider: Arc<dyn Provider> = Arc::from(provider);
    host.provider = Some(provider.clone());
    let (events, renderer) = spawn_renderer(false, None);
    host.events = Mutex::new(Some(events.clone()));
    let host = Arc::new(host);
    let registry = ServerRegistry::start_settling(servers, host.clone()).await;
    for failure in registry.failures() {
        safe_eprintln!("warning: {failure}");
    }
    let (catalog, errors) = ToolCatalog::load(&registry).await;
    for error in errors {
        safe_eprintln!("warning: {error}");
    }
    // Only a catalogue that will be searched needs the encoder (and its download). The embedded
    // model is not offered `search_tools` and pre-selects lexically: semantic ranking always
    // fills its three places with look-alike tools, which cost the 135M model 14 points on the
    // accuracy bench (docs/decisions.md).
    let searches = selection.search_tool
        && selection_for(&selection).effective_mode(&catalog.snapshot()) != SelectionMode::All;
    if let Some(warning) = crate::semantic::attach(&catalog, semantic && searches).await {
        eprintln!("warning: {warning}");
    }
    for line in pin_tools(&catalog, &registry) {
        eprintln!("note: {}", terminal_safe(&line));
    }
    // "[r]emember" writes where chat writes: the config in use, else the user's config.
    let terminal =
        TerminalApprover::remembering_in(config_file.or_else(tether_mcp::config::user_config_path));
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let approver: &dyn Approver = if interactive {
        &terminal
    } else {
        &NonInteractive
    };
    let mut agent = Agent::new(
        provider.as_ref(),
        &registry,
        catalog,
        selection_for(&selection),
        approver,
        options,
    );

    let cancel = CancellationToken::new();
    watch_ctrl_c(Arc::new(Mutex::new(cancel.clone())));
    let question = match attach_resources(&registry, &question).await {
        Ok((text, _)) => text,
        Err(error) => {
            drop(agent);
            registry.shutdown().await;
            return Err(error.into());
        }
    };
    let mut conversation = vec![Message::user(question)];
    let outcome = agent.run_turn(&mut conversation, &events, &cancel).await;
    drop(agent);
    registry.shutdown().await;
    if let Ok(mut slot) = host.events.lock() {
        slot.take();
    }
    drop(events);
    let _ = renderer.await;
    match outcome {
        Ok(outcome) => {
            if outcome.stopped.is_none() {
                println!();
            }
            exit_for(outcome.reason, outcome.text)
        }
        Err(AgentError::Cancelled) => exit_for(StopReason::Cancelled, String::new()),
        Err(AgentError::Model(error)) => Err(model_failure(&error)),
    }
}

/// The exit of a run whose turn ended for `reason` with `text` (the answer or what stopped it).
pub(crate) fn exit_for(reason: StopReason, text: String) -> Result<(), Failure> {
    match reason {
        // A refusal is the model's answer, shown like any other.
        StopReason::EndTurn | StopReason::MaxTokens | StopReason::Refusal => Ok(()),
        StopReason::MaxSteps | StopReason::RepeatedFailure => Err(Failure {
            code: EXIT_STOPPED,
            message: Some(text),
        }),
        StopReason::Cancelled => Err(Failure {
            code: EXIT_CANCELLED,
            message: Some("cancelled".into()),
        }),
        StopReason::Error => Err(Failure::partial(text)),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn results_read_on_one_line() {
        assert_eq!(
            one_line("Allowed directories:\n/tmp/files\n/tmp/more\n", 200),
            "Allowed directories: /tmp/files · /tmp/more"
        );
        assert_eq!(
            one_line("{\n  \"temperature\": 21,\n  \"unit\": \"C\"\n}", 200),
            r#"{"temperature":21,"unit":"C"}"#
        );
        let long: Vec<u32> = (0..100).collect();
        let text = serde_json::to_string_pretty(&long).unwrap();
        assert!(one_line(&text, 40).starts_with("100 items: [0,1,2"));
        assert_eq!(one_line("30", 200), "30");
    }

    use super::*;

    /// A Ctrl-C that comes right after the watch starts, before any task has run, must cancel
    /// the turn; with the default action still in place it would kill this test process.
    #[cfg(unix)]
    #[tokio::test]
    async fn ctrl_c_is_caught_from_the_moment_the_watch_starts() {
        let token = CancellationToken::new();
        watch_ctrl_c(Arc::new(Mutex::new(token.clone())));
        // No await between the two: on this single-threaded runtime no spawned task has run.
        let status = std::process::Command::new("kill")
            .args(["-INT", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(std::time::Duration::from_secs(30), token.cancelled())
            .await
            .expect("the interrupt should cancel the current turn");
    }
}
