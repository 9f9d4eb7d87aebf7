//! Starting the engine for a front end: the model, the servers (with the session's own host,
//! so every question a server asks becomes an event), the catalogue, the encoder and the pins,
//! assembled into a `tether_agent::Session`. What goes wrong on the way (a server that did
//! not start, a failed listing) becomes a notice event, which every front end shows in its
//! own way (a line on stderr, a JSON record, a message in the editor).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tether_agent::{
    AgentEvent, AgentOptions, ModelSlot, ModelSource, Questions, SessionHandle, SessionHost,
    SessionParts, event_channel,
};
use tether_catalog::{SelectionMode, ToolCatalog, ToolSelection, selection_for};
use tether_llm::Provider;
use tether_mcp::{Root, SamplingPolicy, ServerConfig, ServerRegistry};
use tether_protocol::chat::Message;
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

use tether_agent::Settings;

use crate::Failure;
use crate::models::{ModelArgs, Setup, build_provider, setup};

/// What a front end asks of the start.
pub(crate) struct EngineStart<'a> {
    /// The servers to start (the built-in one already added when none is configured).
    pub(crate) servers: Vec<ServerConfig>,
    /// The config's top-level settings.
    pub(crate) settings: &'a Settings,
    /// The model flags.
    pub(crate) args: &'a ModelArgs,
    /// Roots offered to servers.
    pub(crate) roots: Vec<Root>,
    /// Least severe server log level shown (an index into `LOG_LEVELS`).
    pub(crate) log_level: usize,
    /// Whether someone answers questions (permissions, forms, sampling consent).
    pub(crate) interactive: bool,
    /// The conversation so far, for a session that continues a saved one.
    pub(crate) history: Vec<Message>,
    /// Wait for every server to finish starting (each within its own startup timeout)
    /// instead of going on once the others have settled and letting a slow one join later.
    pub(crate) wait_for_all: bool,
}

/// A started session and what its front end needs to stop it cleanly.
pub(crate) struct Engine {
    /// Ops in, events out.
    pub(crate) handle: SessionHandle,
    /// The servers, shut down once the session has ended. The session reads them; a front
    /// end may take them exclusively between turns (the chat's `/add` and `/remove`).
    pub(crate) registry: Arc<RwLock<ServerRegistry>>,
    /// The session's catalogue (shared: a refresh here is what the next turn offers).
    pub(crate) catalog: ToolCatalog,
    /// How tools are offered (search mode's loaded tools).
    pub(crate) selection: Arc<dyn ToolSelection>,
    /// What servers ask of the session, for servers a front end adds and roots it changes.
    pub(crate) host: Arc<SessionHost>,
    /// The settings the session started with (approval mode, system prompt).
    pub(crate) options: AgentOptions,
    /// A sender on the session's event stream, for the front end's own notices (a line of
    /// input that is not an op); they come out in order with the session's.
    pub(crate) notices: tokio::sync::mpsc::UnboundedSender<AgentEvent>,
}

/// A terminal's engine (text `run`, the chat): `servers` under the host's roots and log
/// level, going on without a server that is slow to start (it joins when ready).
pub(crate) async fn start_in_terminal(
    servers: Vec<ServerConfig>,
    settings: &Settings,
    args: &ModelArgs,
    host: &crate::host::TerminalHost,
    interactive: bool,
) -> Result<Engine, Failure> {
    let roots = host.roots.lock().map(|r| r.clone()).unwrap_or_default();
    start(EngineStart {
        servers,
        settings,
        args,
        roots,
        log_level: host.log_level,
        interactive,
        history: Vec::new(),
        wait_for_all: false,
    })
    .await
}

/// `tether run`'s engine: `servers` under the host's roots and log level, asked `question`
/// at once; Ctrl-C becomes an interrupt op (pending questions are answered "cancelled").
pub(crate) async fn start_run(
    servers: Vec<ServerConfig>,
    settings: &Settings,
    args: &ModelArgs,
    host: &crate::host::TerminalHost,
    interactive: bool,
    question: String,
) -> Result<Engine, Failure> {
    let engine = start_in_terminal(servers, settings, args, host, interactive).await?;
    let ops = engine.handle.ops.clone();
    let _ = ops.send(tether_agent::Op::Prompt {
        content: vec![tether_agent::InputBlock::Text { text: question }],
    });
    let interrupt = tokio_util::sync::CancellationToken::new();
    watch_ctrl_c(Arc::new(std::sync::Mutex::new(interrupt.clone())));
    tokio::spawn(async move {
        interrupt.cancelled().await;
        let _ = ops.send(tether_agent::Op::Interrupt);
    });
    Ok(engine)
}

impl Engine {
    /// Waits for the session to end (after a shutdown op) and stops the servers.
    pub(crate) async fn shut_down(self) -> Vec<Message> {
        let Engine {
            handle, registry, ..
        } = self;
        let conversation = handle.task.await.unwrap_or_default();
        // The session held the other handles; once it has ended this one is the last.
        if let Ok(registry) = Arc::try_unwrap(registry) {
            registry.into_inner().shutdown().await;
        }
        conversation
    }
}

/// Builds the model, starts the servers and spawns the session.
pub(crate) async fn start(start: EngineStart<'_>) -> Result<Engine, Failure> {
    let Setup {
        provider,
        options,
        spec,
        selection,
    } = setup(start.args, start.settings).await?;
    let semantic = start.settings.semantic_search;
    let provider: Arc<dyn Provider> = Arc::from(provider);
    let model = ModelSlot::new(spec, provider);
    let (inner_sender, inner_events) = event_channel();
    let questions = Questions::new(inner_sender.clone(), start.interactive);
    let sampling: HashMap<String, SamplingPolicy> = start
        .servers
        .iter()
        .map(|s| (s.name.clone(), s.sampling))
        .collect();
    let host = Arc::new(SessionHost::new(
        questions.clone(),
        model.clone(),
        sampling,
        start.roots,
        start.log_level,
    ));
    let registry = if start.wait_for_all {
        ServerRegistry::start(start.servers, host.clone()).await
    } else {
        ServerRegistry::start_settling(start.servers, host.clone()).await
    };
    let notice = |message: String| {
        let _ = inner_sender.send(AgentEvent::Notice { message });
    };
    for failure in registry.failures() {
        notice(failure.to_string());
    }
    let (catalog, errors) = ToolCatalog::load(&registry).await;
    for error in errors {
        notice(error.to_string());
    }
    // MCP Apps tools meant only for their app's own view are not the model's to call.
    catalog.hide_app_only_tools();
    // Only a catalogue that will be searched needs the encoder (see run.rs): by the model,
    // or for the embedded model's pre-selection, which ranks by meaning too.
    let searches = (selection.search_tool || selection.preload_margin.is_some())
        && selection_for(&selection).effective_mode(&catalog.snapshot()) != SelectionMode::All;
    if let Some(warning) = crate::semantic::attach(&catalog, semantic && searches).await {
        notice(warning);
    }
    for line in pin_tools(&catalog, &registry) {
        notice(line);
    }
    let registry = Arc::new(RwLock::new(registry));
    let models: Arc<dyn ModelSource> = Arc::new(ConfiguredModels {
        args: start.args.clone(),
        settings: start.settings.clone(),
    });
    // The embedded model's pre-selection also offers the built-in reader for a named file.
    #[cfg(feature = "local")]
    let selection = if selection.preload_margin.is_some() {
        crate::named_files::WithNamedFiles::wrap(selection_for(&selection))
    } else {
        selection_for(&selection)
    };
    #[cfg(not(feature = "local"))]
    let selection = selection_for(&selection);
    let handle = tether_agent::Session::spawn(SessionParts {
        model,
        registry: registry.clone() as Arc<dyn tether_agent::ToolServers>,
        catalog: catalog.clone(),
        selection: selection.clone(),
        options: options.clone(),
        questions,
        inner_events,
        inner_sender: inner_sender.clone(),
        history: start.history,
        models: Some(models),
    });
    Ok(Engine {
        handle,
        registry,
        catalog,
        selection,
        host,
        options,
        notices: inner_sender,
    })
}

/// Models by spec, built as `--model` would build them.
struct ConfiguredModels {
    args: ModelArgs,
    settings: Settings,
}

impl ModelSource for ConfiguredModels {
    fn provider<'a>(&'a self, spec: &'a str) -> BoxFuture<'a, Result<Arc<dyn Provider>, String>> {
        Box::pin(async move {
            build_provider(spec, &self.args, &self.settings)
                .await
                .map(Arc::from)
                .map_err(|failure| failure.message.unwrap_or_else(|| "failed".into()))
        })
    }
}

/// The built-in tools server, under `--timeout` when given.
pub(crate) fn builtin_server(timeout: Option<Duration>) -> Result<ServerConfig, Failure> {
    let exe = std::env::current_exe().map_err(|e| {
        Failure::usage(format!(
            "cannot find the tether binary to start the built-in tools: {e}"
        ))
    })?;
    // The tools' digest in the command line: a Tether with other built-in tools is, to the pin
    // book, the built-in server upgraded, pinned anew with what differs (`tools_digest`).
    let mut builtin = ServerConfig::stdio(
        "builtin",
        exe.display().to_string(),
        vec![
            "builtin-server".into(),
            "--tools".into(),
            tether_serve::builtin::tools_digest(),
        ],
    );
    // Our own server: its read-only hints are ours, not a stranger's claims.
    builtin.trust_hints = true;
    if let Some(limit) = timeout {
        builtin.timeout = limit;
        builtin.startup_timeout = limit;
    }
    Ok(builtin)
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

#[cfg(test)]
mod tests {
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
