//! `tether run` in text: one turn of an engine session (`engine.rs`), its events shown on the
//! terminal and its questions asked there (`--json` is json_run.rs). Ctrl-C interrupts the
//! turn and its tool calls, not the program.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use tether_agent::{AgentEvent, Op, StopReason};
use tether_catalog::ToolCatalog;
use tether_mcp::{ServerConfig, ServerRegistry};
use tokio_util::sync::CancellationToken;

use tether_agent::Settings;

use crate::Failure;
use crate::approver::TerminalAnswers;
use crate::engine::start_run;
use crate::host::TerminalHost;
use crate::models::ModelArgs;
use crate::terminal_view::{EventView, Style};

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

/// `tether run "question"`: a session on the engine (`engine.rs`), its events shown on the
/// terminal (or as JSON lines with `--json`, json_run.rs), its questions asked on the terminal
/// when there is one and refused otherwise.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    servers: Vec<ServerConfig>,
    settings: Settings,
    args: ModelArgs,
    question: String,
    json: bool,
    ops_from_stdin: bool,
    host: TerminalHost,
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
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut engine = start_run(servers, &settings, &args, &host, interactive, question).await?;
    let ops = engine.handle.ops.clone();
    // "[r]emember" writes where chat writes: the config in use, else the user's config.
    let answers =
        TerminalAnswers::remembering_in(config_file.or_else(tether_mcp::config::user_config_path));
    let mut view = EventView::new(None, Style::default());
    let mut ended = None;
    while let Some(event) = engine.handle.events.recv().await {
        match &event {
            AgentEvent::TurnEnded {
                stop_reason, text, ..
            } => {
                ended = Some((*stop_reason, text.clone()));
                let _ = ops.send(Op::Shutdown);
            }
            AgentEvent::PermissionRequested { .. }
            | AgentEvent::ElicitationRequested { .. }
            | AgentEvent::SamplingRequested { .. } => {
                view.flush_markdown();
                if let Some(op) = answers.answer(&event).await {
                    let _ = ops.send(op);
                }
            }
            _ => view.show(event),
        }
    }
    view.flush_markdown();
    engine.shut_down().await;
    match ended {
        Some((reason, text)) => {
            if matches!(
                reason,
                StopReason::EndTurn | StopReason::MaxTokens | StopReason::Refusal
            ) {
                safe_println!();
            }
            exit_for(reason, text)
        }
        None => Err(Failure::partial("the session ended before the turn did")),
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
