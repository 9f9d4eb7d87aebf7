//! What the terminal offers servers: roots, sampling with the user's model after consent,
//! elicitation forms typed in at the prompt, and display of their logs and progress. One
//! question at a time owns the terminal (`ask`), shared with the tool approver.

use std::io::{BufRead, Write};
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tether_agent::AgentEvent;
use tether_mcp::{ElicitationAnswer, ElicitationRequest, HostHandler, Root, ServerNotice};

/// MCP's logging levels, least severe first.
pub use tether_agent::questions::LOG_LEVELS;

/// Only one prompt may read the terminal at a time; notices wait for it too, so a server's
/// log line never lands in the middle of a question.
pub(crate) static TERMINAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Prints lines above the chat's input line while it is being edited (rustyline redraws the
/// prompt below them), so a server log arriving at an idle prompt does not print over it.
pub type PromptPrinter = Box<dyn rustyline::ExternalPrinter + Send>;

/// A server's lines that came while a prompt had the terminal, printed once it is answered.
static HELD_LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Prints a line on stderr now, or, while a prompt waits for its answer, once it is answered:
/// a server's log line must not land inside a question.
pub(crate) fn print_or_hold(line: String) {
    if TERMINAL.try_lock().is_ok() {
        safe_eprintln!("{line}");
        return;
    }
    if let Ok(mut held) = HELD_LINES.lock() {
        held.push(line);
    }
    // The prompt may have been answered since the first look: its lines are printed here then.
    if TERMINAL.try_lock().is_ok() {
        print_held();
    }
}

fn print_held() {
    let lines = HELD_LINES
        .lock()
        .map(|mut held| std::mem::take(&mut *held))
        .unwrap_or_default();
    for line in lines {
        safe_eprintln!("{line}");
    }
}

/// Prints `prompt` on stderr and reads one line; `None` at end of input. A server's lines that
/// come meanwhile are printed after the answer.
pub async fn ask(prompt: String) -> Option<String> {
    let turn = TERMINAL.lock().await;
    let answer = read_answer(prompt).await;
    print_held();
    drop(turn);
    print_held();
    answer
}

async fn read_answer(prompt: String) -> Option<String> {
    tokio::task::spawn_blocking(move || {
        let mut stderr = std::io::stderr();
        // Prompts quote servers (elicitation messages, sampling requests, tool arguments).
        let _ = write!(stderr, "{}", crate::render::terminal_safe(&prompt));
        let _ = stderr.flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_string()),
        }
    })
    .await
    .ok()
    .flatten()
}

/// The host of every command run from a terminal or a script.
pub struct TerminalHost {
    /// Whether the user can be asked (stdin and stderr are terminals).
    pub interactive: bool,
    /// Roots offered to servers; `/root` in chat changes them.
    pub roots: Mutex<Vec<Root>>,
    /// Least severe log level shown (index into [`LOG_LEVELS`]).
    pub log_level: usize,
}

impl TerminalHost {
    /// A host for `servers` offering `roots`: only what the user named (`--root`, `"roots"`,
    /// `/root`), never the working directory by default, because a server such as
    /// server-filesystem replaces the directories it was configured with by the client's roots,
    /// and a user who limited a server must stay limited.
    pub fn new(roots: Vec<Root>, log_level: usize) -> TerminalHost {
        use std::io::IsTerminal;
        TerminalHost {
            interactive: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            roots: Mutex::new(roots),
            log_level,
        }
    }

    /// Shows a notice or a restart on stderr.
    fn show(&self, event: AgentEvent) {
        let Some(line) = event.notice_line() else {
            return;
        };
        print_or_hold(line);
    }
}

impl HostHandler for TerminalHost {
    fn roots(&self) -> Vec<Root> {
        self.roots.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn sample<'a>(
        &'a self,
        server: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            // A command with a model runs on the engine, whose host samples with it.
            let _ = params;
            let reason = format!(
                "server \"{server}\" asked for sampling, but this command has no model; use `tether run` or `tether chat`"
            );
            self.show(AgentEvent::Notice {
                message: reason.clone(),
            });
            Err(reason)
        })
    }

    fn elicit<'a>(
        &'a self,
        server: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            if !self.interactive {
                self.show(AgentEvent::Notice {
                    message: format!(
                        "server \"{server}\" asked for input; declined because nobody can answer in a non-interactive run"
                    ),
                });
                return ElicitationAnswer::Decline;
            }
            elicit_on_terminal(server, request).await
        })
    }

    fn log_level(&self) -> Option<String> {
        LOG_LEVELS.get(self.log_level).map(|l| l.to_string())
    }

    fn notify(&self, server: &str, notice: ServerNotice) {
        if let Some(event) = tether_agent::questions::notice_event(server, notice, self.log_level) {
            self.show(event);
        }
    }
}

/// Asks a server's elicitation on the terminal: a URL to visit, or a form filled in field by
/// field.
pub(crate) async fn elicit_on_terminal(
    server: &str,
    request: ElicitationRequest,
) -> ElicitationAnswer {
    match request {
        ElicitationRequest::Url { message, url, .. } => {
            let question = format!(
                "\nserver \"{server}\" asks you to visit a URL: {message}\n  {url}\n(Tether does not open it.) done there? [y]es / [n]o (decline) / [c]ancel, then Enter: "
            );
            choice(ask(question).await, ElicitationAnswer::Accept(Map::new()))
        }
        ElicitationRequest::Form { message, schema } => {
            let question = format!(
                "\nserver \"{server}\" asks: {message}\nanswer? [y]es / [n]o (decline) / [c]ancel, then Enter: "
            );
            match choice(ask(question).await, ElicitationAnswer::Accept(Map::new())) {
                ElicitationAnswer::Accept(_) => match fill_form(&schema).await {
                    Some(values) => ElicitationAnswer::Accept(values),
                    None => ElicitationAnswer::Cancel,
                },
                other => other,
            }
        }
    }
}

fn choice(answer: Option<String>, accept: ElicitationAnswer) -> ElicitationAnswer {
    match answer.as_deref().map(str::to_lowercase).as_deref() {
        Some("y" | "yes") => accept,
        Some("n" | "no") => ElicitationAnswer::Decline,
        _ => ElicitationAnswer::Cancel,
    }
}

/// Asks for each property of a flat form schema; an empty line takes the default. `None`
/// when input ends.
async fn fill_form(schema: &Value) -> Option<Map<String, Value>> {
    let mut values = Map::new();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Some(values);
    };
    for (name, property) in properties {
        let is_required = required.contains(&name.as_str());
        let choices = form_choices(property);
        let label = property
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or(name);
        let kind = property
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("string");
        let kind_label = if kind == "array" {
            "comma-separated list"
        } else {
            kind
        };
        let mut hint = String::new();
        if let Some(description) = property.get("description").and_then(Value::as_str) {
            hint.push_str(&format!(" ({description})"));
        }
        if !choices.is_empty() {
            hint.push_str(&format!(" one of: {}", show_choices(&choices)));
        }
        if let Some(default) = property.get("default") {
            hint.push_str(&format!(" [{}]", show_default(default, &choices)));
        } else if !is_required {
            hint.push_str(" [skip]");
        }
        loop {
            let line = ask(format!("  {label}: {kind_label}{hint}: ")).await?;
            if line.is_empty() {
                if let Some(default) = property.get("default") {
                    values.insert(name.clone(), default.clone());
                    break;
                }
                if !is_required {
                    break;
                }
                safe_eprintln!("  {label} is required");
                continue;
            }
            match form_value(kind, &line, &choices) {
                Ok(value) => {
                    values.insert(name.clone(), value);
                    break;
                }
                Err(problem) => safe_eprintln!("  {problem}"),
            }
        }
    }
    Some(values)
}

/// One allowed value of an enum field, with the title a person should see, if it has one.
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    value: String,
    title: Option<String>,
}

/// The allowed values of an enum property (`enum`, with the legacy `enumNames` as titles, or
/// titled `oneOf`/`anyOf` consts), or of a multi-select's items.
fn form_choices(property: &Value) -> Vec<Choice> {
    if let Some(items) = property.get("items") {
        return form_choices(items);
    }
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        let titles = property.get("enumNames").and_then(Value::as_array);
        return values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                Some(Choice {
                    value: v.as_str()?.to_string(),
                    title: titles
                        .and_then(|t| t.get(i))
                        .and_then(Value::as_str)
                        .map(str::to_string),
                })
            })
            .collect();
    }
    property
        .get("oneOf")
        .or_else(|| property.get("anyOf"))
        .and_then(Value::as_array)
        .map(|options| {
            options
                .iter()
                .filter_map(|o| {
                    Some(Choice {
                        value: o.get("const")?.as_str()?.to_string(),
                        title: o.get("title").and_then(Value::as_str).map(str::to_string),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The choices as the user reads them: titles numbered when there are titles (ids mean
/// nothing to a person), else the plain values.
fn show_choices(choices: &[Choice]) -> String {
    if choices.iter().any(|c| c.title.is_some()) {
        choices
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} {}", i + 1, c.title.as_deref().unwrap_or(&c.value)))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        choices
            .iter()
            .map(|c| c.value.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A default shown by its title when it has one.
fn show_default(default: &Value, choices: &[Choice]) -> String {
    let title = |v: &Value| {
        v.as_str()
            .and_then(|v| choices.iter().find(|c| c.value == v))
            .and_then(|c| c.title.clone())
    };
    match default {
        Value::Array(items) if !choices.is_empty() => items
            .iter()
            .map(|v| title(v).unwrap_or_else(|| v.to_string()))
            .collect::<Vec<_>>()
            .join(", "),
        other => title(other).unwrap_or_else(|| other.to_string()),
    }
}

/// The value the user meant by `typed`: a value, a title (any case) or a choice's number.
fn pick<'a>(choices: &'a [Choice], typed: &str) -> Option<&'a str> {
    choices
        .iter()
        .find(|c| c.value == typed)
        .or_else(|| {
            choices.iter().find(|c| {
                c.title
                    .as_deref()
                    .is_some_and(|t| t.eq_ignore_ascii_case(typed))
            })
        })
        .or_else(|| {
            typed
                .parse::<usize>()
                .ok()
                .filter(|_| choices.iter().any(|c| c.title.is_some()))
                .and_then(|n| n.checked_sub(1))
                .and_then(|n| choices.get(n))
        })
        .map(|c| c.value.as_str())
}

/// Parses one typed-in form value.
fn form_value(kind: &str, line: &str, choices: &[Choice]) -> Result<Value, String> {
    let not_one_of = |bad: &str| format!("\"{bad}\" is not one of {}", show_choices(choices));
    match kind {
        "boolean" => match line.to_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Value::Bool(true)),
            "n" | "no" | "false" => Ok(Value::Bool(false)),
            _ => Err(format!("\"{line}\" is not yes or no")),
        },
        "integer" => line
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("\"{line}\" is not a whole number")),
        "number" => line
            .parse::<f64>()
            .map(Value::from)
            .map_err(|_| format!("\"{line}\" is not a number")),
        "array" => {
            let mut picked = Vec::new();
            for part in line.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                if choices.is_empty() {
                    picked.push(part.to_string());
                } else {
                    picked.push(
                        pick(choices, part)
                            .ok_or_else(|| not_one_of(part))?
                            .to_string(),
                    );
                }
            }
            Ok(json!(picked))
        }
        _ if !choices.is_empty() => pick(choices, line)
            .map(|v| Value::String(v.to_string()))
            .ok_or_else(|| not_one_of(line)),
        _ => Ok(Value::String(line.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_typed_by_the_schema() {
        assert_eq!(form_value("integer", "42", &[]), Ok(json!(42)));
        assert_eq!(form_value("number", "2.5", &[]), Ok(json!(2.5)));
        assert_eq!(form_value("boolean", "yes", &[]), Ok(json!(true)));
        assert!(form_value("integer", "forty", &[]).is_err());
        let colours: Vec<Choice> = ["red", "blue"]
            .into_iter()
            .map(|v| Choice {
                value: v.into(),
                title: None,
            })
            .collect();
        assert_eq!(form_value("string", "red", &colours), Ok(json!("red")));
        assert!(form_value("string", "green", &colours).is_err());
        assert_eq!(
            form_value("array", "red, blue", &colours),
            Ok(json!(["red", "blue"]))
        );
        assert!(form_value("array", "red,green", &colours).is_err());
    }

    #[test]
    fn titled_choices_are_shown_by_title_and_picked_by_title_value_or_number() {
        let heroes = form_choices(&json!({"oneOf": [
            {"const": "hero-1", "title": "Superman"},
            {"const": "hero-2", "title": "Wonder Woman"}
        ]}));
        assert_eq!(show_choices(&heroes), "1 Superman, 2 Wonder Woman");
        assert_eq!(show_default(&json!("hero-1"), &heroes), "Superman");
        for typed in ["wonder woman", "hero-2", "2"] {
            assert_eq!(
                form_value("string", typed, &heroes),
                Ok(json!("hero-2")),
                "{typed}"
            );
        }
        assert!(form_value("string", "Batman", &heroes).is_err());
        let pets =
            form_choices(&json!({"enum": ["pet-1", "pet-2"], "enumNames": ["Cats", "Dogs"]}));
        assert_eq!(form_value("string", "Dogs", &pets), Ok(json!("pet-2")));
        let fish = form_choices(&json!({"items": {"anyOf": [
            {"const": "fish-1", "title": "Tuna"}, {"const": "fish-3", "title": "Trout"}
        ]}}));
        assert_eq!(
            form_value("array", "Tuna, 2", &fish),
            Ok(json!(["fish-1", "fish-3"]))
        );
        let plain = form_choices(&json!({"enum": ["a", "b"]}));
        assert_eq!(show_choices(&plain), "a, b");
        assert!(
            form_value("string", "1", &plain).is_err(),
            "numbers pick only titled choices"
        );
    }
}
