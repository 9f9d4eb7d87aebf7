//! `tether sessions`: the saved chat and editor sessions listed one a line or exported, and
//! the transcript a resumed chat shows first.

use std::io::Write;

use serde_json::Value;
use tether_protocol::chat::Message;

use crate::Failure;
use crate::session::{self, Loaded};
use crate::terminal_view::clip;

/// One line of a session listing: id, date, model, turns, first line.
pub fn session_line(loaded: &Loaded) -> String {
    let date = loaded
        .created
        .get(..16)
        .unwrap_or(&loaded.created)
        .replace('T', " ");
    let name = loaded
        .name
        .as_deref()
        .map(|n| format!(" [{n}]"))
        .unwrap_or_default();
    format!(
        "{}{name}  {date}  {}  {}{}  {}",
        loaded.id,
        loaded.model,
        turns(loaded.turns),
        if loaded.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        clip(&loaded.title(), 60)
    )
}

pub(crate) fn turns(n: usize) -> String {
    if n == 1 {
        "1 turn".into()
    } else {
        format!("{n} turns")
    }
}

/// Prints a resumed conversation so the user sees where they left off.
pub(crate) fn show_transcript(loaded: &Loaded) {
    let mut out = std::io::stderr();
    for message in &loaded.messages {
        let _ = match message {
            Message::User { content } => writeln!(out, "you> {}", clip(content, 400)),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                for call in tool_calls {
                    let _ = writeln!(out, "→ {} {}", call.name, clip(&call.arguments, 200));
                }
                if content.is_empty() {
                    Ok(())
                } else {
                    writeln!(out, "{}", clip(content, 2000))
                }
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => writeln!(
                out,
                "{} {name}: {}",
                if *is_error { "✗" } else { "←" },
                crate::terminal_view::one_line(content, 200)
            ),
            Message::System { .. } => Ok(()),
        };
    }
}

/// `tether sessions [export ID]`.
pub fn sessions_command(export: Option<String>, json: bool) -> Result<(), Failure> {
    let dir = session::sessions_dir()
        .ok_or_else(|| Failure::usage("no data dir for sessions; set TETHER_DATA_DIR"))?;
    if let Some(id) = export {
        let path = session::find(&dir, &id).map_err(Failure::usage)?;
        let loaded = session::load(&path).map_err(|e| Failure::usage(e.to_string()))?;
        if json {
            crate::render::print_json(&session::to_json(&loaded));
        } else {
            safe_print!("{}", session::to_markdown(&loaded));
        }
        return Ok(());
    }
    let sessions = session::list(&dir);
    if json {
        let rows: Vec<Value> = sessions
            .iter()
            .map(|s| {
                serde_json::json!({"id": s.id, "name": s.name, "created": s.created, "model": s.model,
                                   "turns": s.turns, "interrupted": s.interrupted, "title": s.title()})
            })
            .collect();
        crate::render::print_json(&Value::Array(rows));
        return Ok(());
    }
    if sessions.is_empty() {
        safe_println!("no saved sessions in {}", dir.display());
    }
    for loaded in &sessions {
        safe_println!("{}", session_line(loaded));
    }
    Ok(())
}
