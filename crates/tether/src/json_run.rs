//! `tether run --json`: the session's events as JSON lines on stdout, one `AgentEvent` each
//! (the schema is `tether_agent::events`), and with `--input jsonl` the session's ops read as
//! JSON lines on stdin, so a program can approve one call and reject another, answer a
//! server's form or interrupt the turn. Without `--input jsonl` nobody is asked: calls that
//! need approval are refused and forms declined, as in any run without a person.

use std::io::Write;

use tether_agent::{AgentEvent, Op};
use tether_mcp::ServerConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use tether_agent::Settings;

use crate::Failure;
use crate::engine::start_run;
use crate::host::TerminalHost;
use crate::models::ModelArgs;
use crate::run::exit_for;

/// Longest line of input taken as one op (an elicitation answer with a pasted document fits).
const MAX_OP_LINE: usize = 1 << 20;

/// `tether run --json [--input jsonl] QUESTION`.
pub(crate) async fn run(
    servers: Vec<ServerConfig>,
    settings: Settings,
    args: ModelArgs,
    question: String,
    host: TerminalHost,
    ops_from_stdin: bool,
) -> Result<(), Failure> {
    let engine = start_run(servers, &settings, &args, &host, ops_from_stdin, question).await?;
    let ops = engine.handle.ops.clone();
    let reader = ops_from_stdin.then(|| {
        let ops = ops.clone();
        let notices = engine.notices.clone();
        tokio::spawn(read_ops(ops, notices))
    });

    let mut engine = engine;
    let mut stdout = std::io::stdout();
    let mut ended = None;
    while let Some(event) = engine.handle.events.recv().await {
        if let AgentEvent::TurnEnded {
            stop_reason, text, ..
        } = &event
        {
            ended = Some((*stop_reason, text.clone()));
            // One question per run: the session ends with its turn.
            let _ = ops.send(Op::Shutdown);
        }
        let line = serde_json::to_string(&event).unwrap_or_default();
        // A closed stdout (`| head -1`) must not stop the session from ending cleanly.
        let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    }
    if let Some(reader) = reader {
        reader.abort();
    }
    engine.shut_down().await;
    match ended {
        Some((reason, text)) => exit_for(reason, text),
        None => Err(Failure::partial("the session ended before the turn did")),
    }
}

/// Reads ops, one JSON object per line, until stdin ends; a line that is not an op is
/// reported as an `op_rejected` event and skipped.
async fn read_ops(
    ops: tokio::sync::mpsc::UnboundedSender<Op>,
    notices: tokio::sync::mpsc::UnboundedSender<AgentEvent>,
) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = String::new();
    let mut number = 0u64;
    loop {
        line.clear();
        match (&mut lines)
            .take(MAX_OP_LINE as u64 + 1)
            .read_line(&mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        number += 1;
        if line.len() > MAX_OP_LINE && !line.ends_with('\n') {
            let _ = notices.send(AgentEvent::OpRejected {
                message: format!(
                    "stdin line {number}: longer than {MAX_OP_LINE} bytes; input ops stop here"
                ),
            });
            return;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Op>(text) {
            Ok(op) => {
                if ops.send(op).is_err() {
                    return;
                }
            }
            Err(error) => {
                let _ = notices.send(AgentEvent::OpRejected {
                    message: format!(
                        "stdin line {number}: not an op ({error}); write one JSON object per line, e.g. {{\"type\":\"decide\",\"request_id\":\"q1\",\"decision\":\"allow_once\"}}"
                    ),
                });
            }
        }
    }
}
