//! The chat's input: the line editor (history across runs, completion of slash commands,
//! servers, tools, prompts and `@server:uri`, hints), plain lines over a pipe, "did you mean"
//! for slash commands, and `/prompt`'s expansion into messages.

use std::borrow::Cow;
use std::io::BufRead;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};
use tether_catalog::ToolCatalog;
use tether_mcp::{McpError, ServerRegistry};
use tether_protocol::chat::Message;

use crate::session;
use crate::slash::SlashCommand;

/// Names completion offers, gathered when the chat starts.
#[derive(Default, Clone)]
pub(crate) struct Catalog {
    servers: Vec<String>,
    tools: Vec<String>,
    prompts: Vec<(String, String)>,
    resources: Vec<String>,
}

impl Catalog {
    pub(crate) async fn gather(registry: &ServerRegistry, tools: &ToolCatalog) -> Catalog {
        let mut catalog = Catalog {
            tools: tools.snapshot().names().map(str::to_string).collect(),
            ..Catalog::default()
        };
        for connection in registry.connections() {
            let server = connection.name().to_string();
            if let Ok(prompts) = connection.list_prompts().await {
                catalog
                    .prompts
                    .extend(prompts.into_iter().map(|p| (server.clone(), p.name)));
            }
            if let Ok(resources) = connection.list_resources().await {
                catalog.resources.extend(
                    resources
                        .into_iter()
                        .map(|r| format!("@{server}:{}", r.uri)),
                );
            }
            catalog.servers.push(server);
        }
        catalog
    }
}

/// rustyline's helper: completion, and multi-line input (a line ending in `\` or an open
/// code fence continues).
pub(crate) struct ChatHelper {
    pub(crate) catalog: Catalog,
}

impl Completer for ChatHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        let words: Vec<&str> = before.split_whitespace().collect();
        let first_word = start == 0;
        let candidates: Vec<String> = if first_word && word.starts_with('/') {
            SlashCommand::ALL
                .iter()
                .map(|c| format!("/{}", c.name()))
                .collect()
        } else if word.starts_with('@') {
            self.catalog.resources.clone()
        } else {
            match words.first().copied() {
                Some("/tools") => self.catalog.tools.clone(),
                Some("/prompt") if words.len() == 1 || (words.len() == 2 && !word.is_empty()) => {
                    self.catalog.servers.clone()
                }
                Some("/prompt") => self
                    .catalog
                    .prompts
                    .iter()
                    .filter(|(s, _)| Some(&s.as_str()) == words.get(1))
                    .map(|(_, p)| p.clone())
                    .collect(),
                Some("/approve") => vec!["ask".into(), "auto".into(), "never".into()],
                Some("/reconnect") => self.catalog.servers.clone(),
                _ => Vec::new(),
            }
        };
        let pairs = candidates
            .into_iter()
            .filter(|c| c.starts_with(word))
            .map(|c| Pair {
                display: c.clone(),
                replacement: c,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        _default: bool,
    ) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for ChatHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input();
        let open_fence = input.matches("```").count() % 2 == 1;
        if input.ends_with('\\') || open_fence {
            Ok(ValidationResult::Incomplete)
        } else {
            Ok(ValidationResult::Valid(None))
        }
    }
}

impl Helper for ChatHelper {}

/// Where the user's lines come from.
pub(crate) enum Input {
    /// A terminal: the line editor, with history saved across runs.
    Editor(
        Box<Editor<ChatHelper, rustyline::history::FileHistory>>,
        Option<std::path::PathBuf>,
    ),
    /// A pipe: plain lines, no prompt.
    Pipe,
}

/// What reading a line gave.
pub(crate) enum Line {
    Text(String),
    /// Ctrl-C at the prompt: discard the line.
    Interrupted,
    End,
}

impl Input {
    pub(crate) async fn read(self, prompt: &str) -> (Input, Line) {
        match self {
            Input::Pipe => {
                let line = tokio::task::spawn_blocking(|| {
                    let mut line = String::new();
                    match std::io::stdin().lock().read_line(&mut line) {
                        Ok(0) | Err(_) => None,
                        Ok(_) => Some(line),
                    }
                })
                .await
                .ok()
                .flatten();
                let line = match line {
                    Some(line) => Line::Text(line.trim_end_matches(['\n', '\r']).to_string()),
                    None => Line::End,
                };
                (Input::Pipe, line)
            }
            Input::Editor(mut editor, history) => {
                let prompt = prompt.to_string();
                let outcome = tokio::task::spawn_blocking(move || {
                    let line = editor.readline(&prompt);
                    (editor, line)
                })
                .await;
                let Ok((mut editor, line)) = outcome else {
                    return (Input::Pipe, Line::End);
                };
                let line = match line {
                    Ok(text) => {
                        if !text.trim().is_empty() {
                            let _ = editor.add_history_entry(text.as_str());
                            if let Some(path) = &history {
                                let _ = editor.save_history(path);
                            }
                        }
                        // A trailing backslash joined lines; it is not part of the text.
                        Line::Text(text.replace("\\\n", "\n"))
                    }
                    Err(ReadlineError::Interrupted) => Line::Interrupted,
                    Err(_) => Line::End,
                };
                (Input::Editor(editor, history), line)
            }
        }
    }
}

pub(crate) fn history_path() -> Option<std::path::PathBuf> {
    session::sessions_dir().and_then(|d| d.parent().map(|p| p.join("history.txt")))
}

/// The arguments `name` declares (none when the server does not list it: getting it then
/// names the problem).
pub(crate) async fn declared_prompt_arguments(
    connection: &tether_mcp::ServerConnection,
    name: &str,
) -> Vec<tether_protocol::PromptArgument> {
    connection
        .list_prompts()
        .await
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.name == name)
        .map(|p| p.arguments)
        .unwrap_or_default()
}

/// `/prompt SERVER NAME key=value…`: the server's prompt as conversation messages.
pub(crate) async fn expand_prompt(
    registry: &ServerRegistry,
    rest: &str,
) -> Result<Vec<Message>, String> {
    let words = shlex::split(rest.trim())
        .ok_or("/prompt: unbalanced quotes; use /prompt SERVER NAME key=value …")?;
    let [server, name, pairs @ ..] = words.as_slice() else {
        return Err(
            "/prompt needs a server and a prompt name: /prompt SERVER NAME key=value …".into(),
        );
    };
    let connection = registry
        .connection(server)
        .map_err(|e: McpError| e.to_string())?;
    let declared = declared_prompt_arguments(connection, name).await;
    let arguments = crate::arguments::prompt_arguments(pairs, &declared)
        .map_err(|e| format!("/prompt {server} {name}: {e}"))?;
    let result = connection
        .get_prompt(name, arguments)
        .await
        .map_err(|e| e.to_string())?;
    Ok(result
        .messages
        .into_iter()
        .map(|m| {
            let block = tether_protocol::ToolResult {
                content: vec![m.content],
                ..Default::default()
            };
            let (text, _) = tether_agent::results::result_for_model(&block, usize::MAX, false);
            match m.role {
                tether_protocol::Role::Assistant => Message::assistant(text),
                tether_protocol::Role::User => Message::user(text),
            }
        })
        .collect())
}
