//! What a turn looks like on the terminal: answer text on stdout (Markdown when styled), tool
//! activity and notices on stderr, progress bars, the spinner; every message saved to the
//! session log as it is added.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tether_agent::AgentEvent;

use crate::render::{ProgressBar, terminal_safe};
use crate::session::{Record, SessionLog};

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

/// How the chat dresses its output in a terminal.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Style {
    /// Render answers as Markdown (`Some(colour)`), or print them as they come.
    pub(crate) markdown: Option<bool>,
    /// Show a spinner until the first event.
    pub(crate) spinner: bool,
}

/// "waiting for the model" on stderr until the turn's first visible event: a frame every
/// 100 ms from [`Spinner::tick`], erased by [`Spinner::stop`].
pub(crate) struct Spinner {
    tick: Option<tokio::time::Interval>,
    frame: usize,
}

impl Spinner {
    /// A spinner that turns when `enabled` (a person watches a terminal).
    pub(crate) fn new(enabled: bool) -> Spinner {
        Spinner {
            tick: enabled.then(|| tokio::time::interval(std::time::Duration::from_millis(100))),
            frame: 0,
        }
    }

    /// Waits for the next frame and draws it; never ready once stopped.
    pub(crate) async fn tick(&mut self) {
        const FRAMES: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
        match &mut self.tick {
            Some(tick) => {
                tick.tick().await;
                crate::render::redraw_status(&format!(
                    "{} waiting for the model",
                    FRAMES[self.frame % FRAMES.len()]
                ));
                self.frame += 1;
            }
            None => std::future::pending().await,
        }
    }

    /// Erases the spinner, for good.
    pub(crate) fn stop(&mut self) {
        if self.tick.take().is_some() && self.frame > 0 {
            crate::render::clear_status();
        }
    }
}

/// What a turn's events look like on the terminal, and where its messages are saved.
pub(crate) struct EventView {
    session: Option<Arc<Mutex<SessionLog>>>,
    stdout: std::io::Stdout,
    bars: std::collections::HashMap<String, ProgressBar>,
    markdown: Option<crate::markdown::MarkdownStream>,
}

impl EventView {
    /// A view saving messages to `session`, styled as `style` says.
    pub(crate) fn new(session: Option<Arc<Mutex<SessionLog>>>, style: Style) -> EventView {
        EventView {
            session,
            stdout: std::io::stdout(),
            bars: Default::default(),
            markdown: style.markdown.map(crate::markdown::MarkdownStream::new),
        }
    }

    /// Clears the bars of calls that never finished (a turn stopped during them), so what is
    /// printed next starts on a clean line.
    pub(crate) fn finish_bars(&mut self) {
        for (_, mut bar) in self.bars.drain() {
            bar.finish();
        }
    }

    /// Prints the rest of a Markdown answer held back for its line to end.
    pub(crate) fn flush_markdown(&mut self) {
        if let Some(md) = &mut self.markdown {
            let _ = write!(self.stdout, "{}", md.finish());
            let _ = self.stdout.flush();
        }
    }

    /// Shows (or records) one event.
    pub(crate) fn show(&mut self, event: AgentEvent) {
        if let AgentEvent::MessageAdded { message } = &event {
            if let Some(log) = &self.session
                && let Ok(mut log) = log.lock()
                && let Err(error) = log.append(&Record::Message {
                    message: message.clone(),
                })
            {
                safe_eprintln!("warning: cannot save the session: {error}");
            }
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
                safe_eprintln!(
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
                    crate::render::eprintln_red(&line);
                } else {
                    safe_eprintln!("{line}");
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
            | AgentEvent::ModelChanged { .. }
            | AgentEvent::ConversationReplaced { .. }
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
                safe_eprintln!("{}", terminal_safe(&line));
            }
            AgentEvent::Notice { message } => safe_eprintln!("note: {}", terminal_safe(&message)),
            AgentEvent::ServerRestarted {
                server,
                restarts,
                reason,
            } => safe_eprintln!(
                "note: {}",
                terminal_safe(&AgentEvent::restart_line(&server, restarts, &reason))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
