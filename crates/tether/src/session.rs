//! Chat sessions that are never lost: every message is appended to a JSONL file in the user's
//! data dir and synced to disk as it happens, so a crash, `kill -9` or a closed terminal
//! loses at most the line being written. Resuming rebuilds the conversation, marks a turn
//! that never finished, and answers tool calls that never got a result so every provider
//! accepts the history.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_protocol::chat::{Message, Usage};

/// One line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// The first line.
    Session {
        /// Its id (also the file name).
        id: String,
        /// RFC 3339 creation time.
        created: String,
        /// `provider:model` at the start.
        model: String,
        /// Where it was started.
        cwd: String,
    },
    /// A message added to the conversation.
    Message {
        /// The message.
        message: Message,
    },
    /// A turn ended.
    Turn {
        /// `complete`, `stopped`, `cancelled`, `failed` or `interrupted`.
        status: String,
        /// Tokens of the turn.
        usage: Usage,
    },
    /// `/model` switched the model.
    Model {
        /// The new `provider:model`.
        model: String,
    },
    /// `/clear` emptied the conversation (also written before a compacted one).
    Clear,
    /// `/save NAME` named the session.
    Name {
        /// The name.
        name: String,
    },
    /// `/add` started a server (`--resume` starts it again).
    ServerAdded {
        /// Its name.
        name: String,
        /// What `/add` was given, with the name: `NAME=COMMAND ARGS…` or `NAME=URL`.
        spec: String,
    },
    /// `/remove` stopped a server.
    ServerRemoved {
        /// Its name.
        name: String,
    },
}

/// Tether's data dir: `$TETHER_DATA_DIR`, else `tether` in the user's data dir.
fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("TETHER_DATA_DIR") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => dirs::data_dir().map(|d| d.join("tether")),
    }
}

/// Where tool results too long for the model are saved whole.
pub fn results_dir() -> Option<PathBuf> {
    data_dir().map(|d| d.join("results"))
}

/// The tool pin file.
pub fn pins_path() -> Option<PathBuf> {
    data_dir().map(|d| d.join("pins.json"))
}

/// The directory of session files.
pub fn sessions_dir() -> Option<PathBuf> {
    data_dir().map(|d| d.join("sessions"))
}

/// An open session file that records as the conversation goes.
pub struct SessionLog {
    /// The id.
    pub id: String,
    path: PathBuf,
    file: File,
}

impl SessionLog {
    /// Starts a new session file.
    pub fn create(dir: &Path, model: &str) -> std::io::Result<SessionLog> {
        // Conversations hold what tools read (files, keys a model was shown): the user's alone.
        tether_mcp::private_files::private_dir(dir)?;
        let now = chrono::Local::now();
        let id = format!(
            "{}-{:04x}",
            now.format("%Y%m%d-%H%M%S"),
            std::process::id() & 0xffff
        );
        // Two sessions started in the same second by one process (an editor's) each get a
        // file of their own.
        let base = id;
        let mut copy = 1;
        let (id, path, file) = loop {
            let id = if copy == 1 {
                base.clone()
            } else {
                format!("{base}-{copy}")
            };
            let path = dir.join(format!("{id}.jsonl"));
            match tether_mcp::private_files::create_new(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && copy < 100 => copy += 1,
                other => break (id, path, other?),
            }
        };
        let mut log = SessionLog { id, path, file };
        log.append(&Record::Session {
            id: log.id.clone(),
            created: now.to_rfc3339(),
            model: model.to_string(),
            cwd: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        })?;
        Ok(log)
    }

    /// Reopens a session file to append to it.
    pub fn reopen(path: &Path) -> std::io::Result<SessionLog> {
        let file = OpenOptions::new().append(true).open(path)?;
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(SessionLog {
            id,
            path: path.to_path_buf(),
            file,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record and syncs it to disk before returning.
    pub fn append(&mut self, record: &Record) -> std::io::Result<()> {
        let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }
}

/// A session read back from its file.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Its id.
    pub id: String,
    /// When it was created.
    pub created: String,
    /// The model last used.
    pub model: String,
    /// The conversation as it stands.
    pub messages: Vec<Message>,
    /// Finished turns.
    pub turns: usize,
    /// Whether the last turn never finished (a crash or kill during it).
    pub interrupted: bool,
    /// Tokens used over all turns.
    pub usage: Usage,
    /// The name given with `/save`.
    pub name: Option<String>,
    /// Servers added with `/add` and not removed since, as `(name, spec)`.
    pub servers: Vec<(String, String)>,
}

impl Loaded {
    /// The first line of the first user message, for listings.
    pub fn title(&self) -> String {
        self.messages
            .iter()
            .find_map(|m| match m {
                Message::User { content } => content.lines().next().map(str::to_string),
                _ => None,
            })
            .unwrap_or_default()
    }
}

/// Reads a session file. A torn last line (the process died while writing it) is skipped.
pub fn load(path: &Path) -> std::io::Result<Loaded> {
    let text = std::fs::read_to_string(path)?;
    let mut loaded = Loaded {
        id: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ..Loaded::default()
    };
    let mut open_turn = false;
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<Record>(line) else {
            continue;
        };
        match record {
            Record::Session { created, model, .. } => {
                loaded.created = created;
                loaded.model = model;
            }
            Record::Message { message } => {
                loaded.messages.push(message);
                open_turn = true;
            }
            Record::Turn { usage, status } => {
                loaded.usage += usage;
                if status != "interrupted" {
                    loaded.turns += 1;
                }
                open_turn = false;
            }
            Record::Model { model } => loaded.model = model,
            Record::Clear => {
                loaded.messages.clear();
                open_turn = false;
            }
            Record::Name { name } => loaded.name = Some(name),
            Record::ServerAdded { name, spec } => {
                loaded.servers.retain(|(n, _)| *n != name);
                loaded.servers.push((name, spec));
            }
            Record::ServerRemoved { name } => loaded.servers.retain(|(n, _)| *n != name),
        }
    }
    loaded.interrupted = open_turn;
    answer_dangling_calls(&mut loaded.messages);
    Ok(loaded)
}

/// Gives every tool call without a result an error result, so the history is valid for
/// providers that require each call to be answered.
fn answer_dangling_calls(messages: &mut Vec<Message>) {
    tether_agent::answer_calls_left_open(
        messages,
        "Error: interrupted: Tether stopped before this call finished; its outcome is unknown",
    );
}

/// Every session in `dir`, newest first.
pub fn list(dir: &Path) -> Vec<Loaded> {
    let mut sessions: Vec<Loaded> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
                .filter_map(|p| load(&p).ok())
                .collect()
        })
        .unwrap_or_default();
    sessions.sort_by(|a, b| b.id.cmp(&a.id));
    sessions
}

/// The file of session `id` (a unique prefix is enough), or why there is none.
pub fn find(dir: &Path, id: &str) -> Result<PathBuf, String> {
    let sessions = list(dir);
    let matching: Vec<&Loaded> = sessions
        .iter()
        .filter(|s| s.id.starts_with(id) || s.name.as_deref() == Some(id))
        .collect();
    match matching.as_slice() {
        [one] => Ok(dir.join(format!("{}.jsonl", one.id))),
        [] => Err(format!(
            "no session \"{id}\" in {}; `tether sessions` lists them",
            dir.display()
        )),
        many => Err(format!(
            "\"{id}\" matches {} sessions ({}); give more of the id",
            many.len(),
            many.iter()
                .take(5)
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The conversation as Markdown, for `/export` and `tether sessions export`.
pub fn to_markdown(loaded: &Loaded) -> String {
    let mut out = format!(
        "# Tether session {}\n\nModel: {}. Started {}.\n",
        loaded.id, loaded.model, loaded.created
    );
    out.push_str(&tether_agent::compaction::transcript(&loaded.messages));
    out
}

/// The conversation as JSON.
pub fn to_json(loaded: &Loaded) -> Value {
    serde_json::json!({
        "id": loaded.id, "created": loaded.created, "model": loaded.model,
        "turns": loaded.turns, "interrupted": loaded.interrupted, "usage": loaded.usage,
        "messages": loaded.messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::chat::ToolCall;

    #[test]
    fn a_session_survives_a_torn_line_and_an_unfinished_turn() {
        let dir = std::env::temp_dir().join(format!("tether-session-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut log = SessionLog::create(&dir, "openai:x").unwrap();
        log.append(&Record::Message {
            message: Message::user("first"),
        })
        .unwrap();
        log.append(&Record::Message {
            message: Message::assistant("one"),
        })
        .unwrap();
        log.append(&Record::Turn {
            status: "complete".into(),
            usage: Usage::default(),
        })
        .unwrap();
        log.append(&Record::Message {
            message: Message::user("second"),
        })
        .unwrap();
        log.append(&Record::Message {
            message: Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "s__slow".into(),
                    arguments: "{}".into(),
                }],
            },
        })
        .unwrap();
        // The process dies while writing the next line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(log.path())
            .unwrap()
            .write_all(b"{\"type\":\"mess")
            .unwrap();
        let loaded = load(log.path()).unwrap();
        assert_eq!(loaded.turns, 1);
        assert!(loaded.interrupted);
        assert_eq!(loaded.title(), "first");
        assert_eq!(loaded.messages.len(), 5);
        assert!(matches!(
            &loaded.messages[4],
            Message::Tool { tool_call_id, is_error: true, .. } if tool_call_id == "c1"
        ));
        assert_eq!(find(&dir, &log.id[..8]).unwrap(), log.path());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
