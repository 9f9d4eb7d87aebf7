//! For the embedded model: a message that names a file in the working directory ("what's in
//! notes.txt?", "my shopping list" for shopping.md) is about reading it, so the built-in
//! `read_file` is offered beside whatever the pre-selection chose for the words (which may
//! rank `list_files` first for "show me my shopping list"); the model then reads that file
//! (tether-local's `paths`). A decorator on the turn's selection: the catalogue knows nothing
//! of the filesystem.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tether_catalog::{Resolved, SelectionMode, Snapshot, ToolSelection};
use tether_protocol::chat::ToolDefinition;

/// The built-in server's file reader, qualified.
const READ_FILE: &str = "builtin__read_file";

/// `inner`, plus the built-in `read_file` on turns whose message names a file.
pub(crate) struct WithNamedFiles {
    inner: Arc<dyn ToolSelection>,
    /// Whether this turn added `read_file`.
    added: AtomicBool,
}

impl WithNamedFiles {
    pub(crate) fn wrap(inner: Arc<dyn ToolSelection>) -> Arc<dyn ToolSelection> {
        Arc::new(WithNamedFiles {
            inner,
            added: AtomicBool::new(false),
        })
    }

    fn added(&self) -> bool {
        self.added.load(Ordering::Relaxed)
    }
}

/// Whether `text` names a file under the working directory.
fn names_a_file(text: &str) -> bool {
    let root = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let files = tether_local::paths::files_under(&root);
    !tether_local::paths::files_named_in(text, &files).is_empty()
}

impl ToolSelection for WithNamedFiles {
    fn mode(&self) -> SelectionMode {
        self.inner.mode()
    }

    fn start_turn(&self, snapshot: &Snapshot, user_text: &str) -> Vec<String> {
        let mut names = self.inner.start_turn(snapshot, user_text);
        let add = self.inner.effective_mode(snapshot) != SelectionMode::All
            && snapshot.position(READ_FILE).is_some()
            && !names.iter().any(|n| n == READ_FILE)
            && names_a_file(user_text);
        self.added.store(add, Ordering::Relaxed);
        if add {
            names.push(READ_FILE.to_string());
        }
        names
    }

    fn offer(&self, snapshot: &Snapshot) -> Vec<ToolDefinition> {
        let mut offered = self.inner.offer(snapshot);
        if self.added()
            && !offered.iter().any(|d| d.name == READ_FILE)
            && let Some(position) = snapshot.position(READ_FILE)
        {
            offered.push(snapshot.definitions()[position].clone());
        }
        offered
    }

    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
        self.inner.resolve(snapshot, name, arguments)
    }

    fn loaded(&self) -> Vec<String> {
        let mut loaded = self.inner.loaded();
        if self.added() && !loaded.iter().any(|n| n == READ_FILE) {
            loaded.push(READ_FILE.to_string());
        }
        loaded
    }

    fn reachable_servers(&self, snapshot: &Snapshot) -> Option<Vec<String>> {
        let mut servers = self.inner.reachable_servers(snapshot)?;
        if self.added()
            && let Some(tool) = snapshot.resolve(READ_FILE)
            && !servers.contains(&tool.server)
        {
            servers.push(tool.server.clone());
        }
        Some(servers)
    }

    fn effective_mode(&self, snapshot: &Snapshot) -> SelectionMode {
        self.inner.effective_mode(snapshot)
    }

    fn after_failed_call(&self, snapshot: &Snapshot, name: &str) -> Vec<String> {
        self.inner.after_failed_call(snapshot, name)
    }
}
