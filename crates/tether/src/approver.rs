//! The terminal's approver: asks before a call on standard error and reads the answer,
//! remembering "always" answers for the session, a server, or in the config file.

use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tether_agent::{ApprovalRequest, Approver};

use crate::host::ask;
use crate::terminal_view::clip;

/// Asks on the terminal; only used when stdin and stderr are terminals.
#[derive(Default)]
pub(crate) struct TerminalApprover {
    /// Tools the user said "always" to, for this session.
    always: Mutex<Vec<String>>,
    /// Servers the user said "always" to, for this session.
    always_servers: Mutex<Vec<String>>,
    /// The config file where "always, and remember" answers are written.
    config_file: Option<std::path::PathBuf>,
}

impl TerminalApprover {
    /// An approver that can write lasting "always" answers into `config_file`.
    pub(crate) fn remembering_in(config_file: Option<std::path::PathBuf>) -> TerminalApprover {
        TerminalApprover {
            config_file,
            ..TerminalApprover::default()
        }
    }

    /// Adds `pattern` to the config's `approval.allow` list, keeping everything else.
    fn remember(&self, pattern: &str) -> Result<std::path::PathBuf, String> {
        let path = self
            .config_file
            .clone()
            .ok_or("no config file to write to")?;
        let mut config: Value = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let allow = config
            .as_object_mut()
            .ok_or("the config is not a JSON object")?
            .entry("approval")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or("\"approval\" is not an object")?
            .entry("allow")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or("\"approval.allow\" is not a list")?;
        if !allow.iter().any(|p| p == pattern) {
            allow.push(json!(pattern));
        }
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let text = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
        let partial = path.with_extension("json.part");
        std::fs::write(&partial, text + "\n")
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}

impl Approver for TerminalApprover {
    fn interactive(&self) -> bool {
        true
    }

    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let name = request.tool.qualified_name.clone();
            let server = request.tool.server.clone();
            let remembered = self
                .always
                .lock()
                .map(|a| a.contains(&name))
                .unwrap_or(false)
                || self
                    .always_servers
                    .lock()
                    .map(|a| a.contains(&server))
                    .unwrap_or(false);
            if remembered {
                return true;
            }
            let arguments = clip(&request.arguments.to_string(), 300);
            let hints = &request.tool.tool.annotations;
            let warning = if hints.destructive_hint == Some(true) {
                " (destructive)"
            } else {
                ""
            };
            let prompt = format!(
                "\nallow {name}{warning} {arguments}? [y]es / [n]o / [a]lways for this tool / always for [s]erver \"{server}\" / [r]emember in the config, then Enter: "
            );
            let answer = ask(prompt).await.unwrap_or_default().to_lowercase();
            match answer.as_str() {
                "y" | "yes" => true,
                "a" | "always" => {
                    if let Ok(mut always) = self.always.lock() {
                        always.push(name);
                    }
                    true
                }
                "r" | "remember" => {
                    match self.remember(&name) {
                        Ok(path) => safe_eprintln!("(allowed {name} in {})", path.display()),
                        Err(error) => safe_eprintln!("warning: not remembered: {error}"),
                    }
                    if let Ok(mut always) = self.always.lock() {
                        always.push(name);
                    }
                    true
                }
                "s" | "server" => {
                    if let Ok(mut always) = self.always_servers.lock() {
                        always.push(server);
                    }
                    true
                }
                _ => false,
            }
        })
    }
}
