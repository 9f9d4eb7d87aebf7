//! `tether run` in text: one turn of an engine session (`engine.rs`), its events shown on the
//! terminal and its questions asked there (`--json` is json_run.rs). Ctrl-C interrupts the
//! turn and its tool calls, not the program.

use std::io::IsTerminal;

use tether_agent::{AgentEvent, Op, StopReason};
use tether_mcp::ServerConfig;

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

/// `tether run "question"`: a session on the engine (`engine.rs`), its events shown on the
/// terminal (or as JSON lines with `--json`, json_run.rs), its questions asked on the terminal
/// when there is one and refused otherwise.
pub async fn run(
    servers: Vec<ServerConfig>,
    settings: Settings,
    args: ModelArgs,
    question: String,
    host: TerminalHost,
    config_file: Option<std::path::PathBuf>,
) -> Result<(), Failure> {
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
    view.finish_bars();
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
