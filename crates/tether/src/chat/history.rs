//! What the chat shows and writes of its conversation: `/result` (a whole tool result) and
//! `/export` (the conversation as Markdown or JSON), from the conversation it mirrors and the
//! session file.

use tether_protocol::chat::Message;

use super::Chat;
use crate::session::{self, Loaded};

impl Chat {
    /// `/result [N]`: the whole Nth-last tool result.
    pub(super) fn show_result(&self, rest: &str) -> Result<(), String> {
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
            Some((name, content)) => {
                safe_println!("{name}:\n{content}");
                Ok(())
            }
            None => Err("no such tool result in this conversation".into()),
        }
    }

    /// `/export FILE.md|FILE.json`.
    pub(super) fn export(&self, rest: &str) -> Result<(), String> {
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
        // The session file holds what the export needs (start time, finished turns, name);
        // it is written line by line, so it is up to date. The conversation mirrored here is
        // what the model sees now (after /clear or /compact).
        let saved = self
            .log
            .as_ref()
            .and_then(|l| l.lock().ok().map(|l| l.path().to_path_buf()))
            .and_then(|path| session::load(&path).ok());
        let loaded = Loaded {
            model: self.model.clone(),
            messages: self.conversation.clone(),
            usage: self.usage,
            ..saved.unwrap_or_default()
        };
        let text = if json {
            serde_json::to_string_pretty(&session::to_json(&loaded)).map_err(|e| e.to_string())?
        } else {
            session::to_markdown(&loaded)
        };
        std::fs::write(path, text).map_err(|e| format!("/export {rest}: {e}"))?;
        safe_println!("wrote {}", path.display());
        Ok(())
    }
}
