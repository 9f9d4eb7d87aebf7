//! The terminal's answers to questions: asks before a call on standard error and reads the
//! answer, remembering "always" answers for the session, a server, or in the config file.
//! `TerminalAnswers` answers a session's question events with ops (text `run` and the chat).

use std::sync::Mutex;

use serde_json::{Map, Value, json};
use tether_agent::{AgentEvent, AnswerAction, Op, PermissionDecision};
use tether_mcp::{ElicitationAnswer, ElicitationRequest};

use crate::host::ask;
use crate::terminal_view::clip;

/// Answers a session's questions on the terminal (stdin and stderr are terminals).
#[derive(Default)]
pub(crate) struct TerminalAnswers {
    /// Servers the user said "always" to, for this run.
    always_servers: Mutex<Vec<String>>,
    /// Where "[r]emember" writes.
    config_file: Option<std::path::PathBuf>,
}

impl TerminalAnswers {
    /// Answers that can write lasting "always" answers into `config_file`.
    pub(crate) fn remembering_in(config_file: Option<std::path::PathBuf>) -> TerminalAnswers {
        TerminalAnswers {
            config_file,
            ..TerminalAnswers::default()
        }
    }

    /// The op answering a question event; `None` for other events.
    pub(crate) async fn answer(&self, event: &AgentEvent) -> Option<Op> {
        match event {
            AgentEvent::PermissionRequested {
                request_id,
                name,
                arguments,
                kind,
                ..
            } => {
                let server = name
                    .split_once("__")
                    .map(|(server, _)| server.to_string())
                    .unwrap_or_default();
                let remembered = self
                    .always_servers
                    .lock()
                    .is_ok_and(|a| a.contains(&server));
                let decision = if remembered {
                    PermissionDecision::AllowOnce
                } else {
                    let warning = if *kind == tether_agent::ToolKind::Delete {
                        " (destructive)"
                    } else {
                        ""
                    };
                    let arguments = clip(&arguments.to_string(), 300);
                    let prompt = format!(
                        "\nallow {name}{warning} {arguments}? [y]es / [n]o / [a]lways for this tool / always for [s]erver \"{server}\" / [r]emember in the config, then Enter: "
                    );
                    let answer = ask(prompt).await.unwrap_or_default().to_lowercase();
                    match answer.as_str() {
                        "y" | "yes" => PermissionDecision::AllowOnce,
                        "a" | "always" => PermissionDecision::AllowAlways,
                        "r" | "remember" => {
                            match remember(self.config_file.as_deref(), name) {
                                Ok(path) => {
                                    safe_eprintln!("(allowed {name} in {})", path.display())
                                }
                                Err(error) => safe_eprintln!("warning: not remembered: {error}"),
                            }
                            PermissionDecision::AllowAlways
                        }
                        "s" | "server" => {
                            if let Ok(mut always) = self.always_servers.lock() {
                                always.push(server);
                            }
                            PermissionDecision::AllowOnce
                        }
                        _ => PermissionDecision::RejectOnce,
                    }
                };
                Some(Op::Decide {
                    request_id: request_id.clone(),
                    decision,
                })
            }
            AgentEvent::SamplingRequested {
                request_id,
                summary,
                ..
            } => {
                let prompt = format!("\n{summary}\nallow? [y]es / [n]o, then Enter: ");
                let yes = matches!(
                    ask(prompt).await.map(|a| a.to_lowercase()).as_deref(),
                    Some("y" | "yes")
                );
                Some(Op::Decide {
                    request_id: request_id.clone(),
                    decision: if yes {
                        PermissionDecision::AllowOnce
                    } else {
                        PermissionDecision::RejectOnce
                    },
                })
            }
            AgentEvent::ElicitationRequested {
                request_id,
                server,
                message,
                schema,
                url,
                ..
            } => {
                let request = match (url, schema) {
                    (Some(url), _) => ElicitationRequest::Url {
                        message: message.clone(),
                        url: url.clone(),
                        elicitation_id: String::new(),
                    },
                    (None, schema) => ElicitationRequest::Form {
                        message: message.clone(),
                        schema: schema.clone().unwrap_or_default(),
                    },
                };
                let (action, content) = match crate::host::elicit_on_terminal(server, request).await
                {
                    ElicitationAnswer::Accept(content) => (AnswerAction::Accept, content),
                    ElicitationAnswer::Decline => (AnswerAction::Decline, Map::new()),
                    ElicitationAnswer::Cancel => (AnswerAction::Cancel, Map::new()),
                };
                Some(Op::Answer {
                    request_id: request_id.clone(),
                    action,
                    content,
                })
            }
            _ => None,
        }
    }
}

/// Adds `pattern` to the `approval.allow` list of the config at `config_file`, keeping
/// everything else.
fn remember(
    config_file: Option<&std::path::Path>,
    pattern: &str,
) -> Result<std::path::PathBuf, String> {
    let path = config_file
        .map(std::path::Path::to_path_buf)
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
