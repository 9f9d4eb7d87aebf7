//! `tether run` in text: build the provider and the servers, drive the agent loop, and render
//! its events on the terminal (`--json` goes to the engine, json_run.rs). Ctrl-C cancels the
//! running turn and its tool calls, not the program.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tether_agent::{Agent, AgentError, Approver, NonInteractive, StopReason, attach_resources};
use tether_catalog::{SelectionMode, ToolCatalog, selection_for};
use tether_llm::Provider;
use tether_mcp::{ServerConfig, ServerRegistry};
use tether_protocol::chat::Message;
use tokio_util::sync::CancellationToken;

use crate::Failure;
use crate::approver::TerminalApprover;
use crate::host::TerminalHost;
use crate::models::{ModelArgs, Setup, model_failure, setup};
use crate::render::terminal_safe;
use crate::terminal_view::spawn_renderer;

/// Exit code of a run stopped by the step limit or repeated failures.
const EXIT_STOPPED: u8 = 4;
/// Exit code after Ctrl-C, as shells expect.
const EXIT_CANCELLED: u8 = 130;

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
        safe_eprintln!("warning: {warning}");
    }
    for line in pin_tools(&catalog, &registry) {
        safe_eprintln!("note: {}", terminal_safe(&line));
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
                safe_println!();
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
