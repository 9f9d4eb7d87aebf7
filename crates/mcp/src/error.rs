//! The one error type of the MCP layer. Every message names the server (or config place)
//! and the operation, and says what to do where there is something to do.

use std::time::Duration;

/// Everything that can go wrong between Tether and its MCP servers.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    /// The configuration (file or command line) is malformed.
    #[error("config {place}: {message}")]
    Config {
        /// File with line and column, or the flag.
        place: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// No server by that name.
    #[error("unknown server \"{name}\"{}", suggestion_suffix(suggestions, known))]
    UnknownServer {
        /// The name asked for.
        name: String,
        /// Close matches.
        suggestions: Vec<String>,
        /// Every configured server, when there are few enough to list.
        known: Vec<String>,
    },
    /// The server has no tool (or prompt, or resource) by that name.
    #[error("server \"{server}\": unknown {what} \"{name}\"{}", suggestion_suffix(suggestions, &[]))]
    UnknownItem {
        /// The server asked.
        server: String,
        /// `tool`, `prompt`, …
        what: &'static str,
        /// The name asked for.
        name: String,
        /// Close matches.
        suggestions: Vec<String>,
    },
    /// The config's `allowedTools`/`disabledTools` leave this tool out.
    #[error(
        "server \"{server}\": tool \"{name}\" is disabled in the config (\"allowedTools\" or \"disabledTools\" of server \"{server}\"); change the list to call it"
    )]
    DisabledTool {
        /// The server.
        server: String,
        /// The tool.
        name: String,
    },
    /// The server is disabled in the config.
    #[error("server \"{0}\" is disabled in the config; remove \"disabled\": true to use it")]
    Disabled(String),
    /// The server was slower to start than the others and is still starting; it joins when
    /// ready.
    #[error(
        "server \"{0}\" is still starting; its tools are offered once it is ready (see \"startupTimeout\")"
    )]
    Starting(String),
    /// The server could not be started or reached, or it went away.
    #[error("server \"{server}\": {detail}")]
    Unreachable {
        /// Server name.
        server: String,
        /// What happened, with the server's own last words when we have them.
        detail: String,
    },
    /// The server did not answer in time.
    #[error("server \"{server}\": {operation} timed out after {}{}", fmt_duration(*after), hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    Timeout {
        /// Server name.
        server: String,
        /// What we were waiting for, e.g. `tool "read"`.
        operation: String,
        /// How long we waited.
        after: Duration,
        /// What the server did meanwhile (non-JSON output, stderr), when known.
        hint: Option<String>,
    },
    /// The server answered with a JSON-RPC error.
    #[error("server \"{server}\": {operation} failed: {message} (code {code})")]
    Rpc {
        /// Server name.
        server: String,
        /// What we asked for.
        operation: String,
        /// JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
        /// The error's `data`, kept so a gateway can pass the error on whole.
        data: Option<Box<serde_json::Value>>,
    },
    /// The server needs the user to finish a step at a URL first (the JSON-RPC error
    /// -32042, "URL elicitation required"): the URLs are shown, never opened.
    #[error(
        "server \"{server}\": {operation} needs you to finish a step in your browser first: {}; Tether does not open links: open it yourself, then try again",
        describe_urls(urls)
    )]
    UrlRequired {
        /// Server name.
        server: String,
        /// What we asked for.
        operation: String,
        /// Each URL with the server's message about it, control characters removed.
        urls: Vec<(String, String)>,
    },
    /// Arguments given by the user do not make a valid request.
    #[error("{0}")]
    InvalidArguments(String),
    /// OAuth sign-in or token handling failed; the message names the server and the step.
    #[error("{0}")]
    Auth(String),
    /// The server wants an OAuth token (401) or more scopes (403) than Tether holds.
    #[error("server \"{server}\" requires OAuth sign-in; run `tether auth login {server}`")]
    SignInRequired {
        /// Server name.
        server: String,
        /// The server's `WWW-Authenticate` challenge, to start the flow from.
        challenge: Option<String>,
    },
}

/// Coarse classes of failure; front ends map them to exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The user's input or config is wrong.
    Usage,
    /// A server could not be reached or stopped answering.
    Unreachable,
    /// The server understood and refused.
    Server,
    /// The server needs the user to do something first (open a URL).
    UserAction,
}

impl McpError {
    /// Which class of failure this is.
    pub fn class(&self) -> ErrorClass {
        match self {
            McpError::Config { .. }
            | McpError::UnknownServer { .. }
            | McpError::UnknownItem { .. }
            | McpError::DisabledTool { .. }
            | McpError::Disabled(_)
            | McpError::InvalidArguments(_) => ErrorClass::Usage,
            McpError::Unreachable { .. }
            | McpError::Timeout { .. }
            | McpError::Starting(_)
            | McpError::Auth(_)
            | McpError::SignInRequired { .. } => ErrorClass::Unreachable,
            McpError::Rpc { .. } => ErrorClass::Server,
            McpError::UrlRequired { .. } => ErrorClass::UserAction,
        }
    }
}

fn describe_urls(urls: &[(String, String)]) -> String {
    urls.iter()
        .map(|(url, message)| {
            if message.is_empty() {
                url.clone()
            } else {
                format!("{url} ({message})")
            }
        })
        .collect::<Vec<_>>()
        .join(", and ")
}

/// The URLs of a -32042 error's `data.elicitations` (URL mode), each with its message, as the
/// server wrote them (front ends strip escape sequences before a terminal sees them).
pub fn elicitation_urls(data: Option<&serde_json::Value>) -> Vec<(String, String)> {
    let clean =
        |v: &serde_json::Value| -> String { v.as_str().unwrap_or_default().trim().to_string() };
    data.and_then(|d| d.get("elicitations"))
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|e| e.get("url").is_some())
                .map(|e| (clean(&e["url"]), clean(&e["message"])))
                .filter(|(url, _)| !url.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn suggestion_suffix(suggestions: &[String], known: &[String]) -> String {
    let quote = |v: &[String]| {
        v.iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !suggestions.is_empty() {
        format!("; did you mean {}?", quote(suggestions))
    } else if !known.is_empty() {
        format!("; configured: {}", quote(known))
    } else {
        String::new()
    }
}

/// `30s`, `1.5s`, `250ms`: short and exact enough for messages.
pub fn fmt_duration(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Names from `candidates` close to `wanted`, best first, at most three.
pub fn near_matches<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let wanted_lower = wanted.to_lowercase();
    let mut scored: Vec<(f64, &str)> = candidates
        .into_iter()
        .map(|c| {
            let lower = c.to_lowercase();
            // Damerau: a swapped pair of letters (`ecoh`) is one slip, not two.
            let mut score = strsim::normalized_damerau_levenshtein(&wanted_lower, &lower);
            if lower.contains(&wanted_lower) || wanted_lower.contains(&lower) {
                score = score.max(0.9);
            }
            (score, c)
        })
        .filter(|(score, _)| *score >= 0.6)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    // Only names about as close as the best one: a clear winner is suggested alone.
    let best = scored.first().map(|(score, _)| *score).unwrap_or(0.0);
    scored
        .into_iter()
        .filter(|(score, _)| *score >= best - 0.05)
        .take(3)
        .map(|(_, c)| c.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_place_and_the_fix() {
        let e = McpError::UnknownServer {
            name: "everythin".into(),
            suggestions: near_matches("everythin", ["everything", "time"]),
            known: vec![],
        };
        assert_eq!(
            e.to_string(),
            "unknown server \"everythin\"; did you mean \"everything\"?"
        );
        let e = McpError::Timeout {
            server: "files".into(),
            operation: "tool \"read\"".into(),
            after: Duration::from_secs(30),
            hint: None,
        };
        assert_eq!(
            e.to_string(),
            "server \"files\": tool \"read\" timed out after 30s"
        );
        assert_eq!(e.class(), ErrorClass::Unreachable);
    }

    #[test]
    fn near_matches_prefers_close_names() {
        let got = near_matches("get_sum", ["get-sum", "echo", "get-env"]);
        assert_eq!(got.first().map(String::as_str), Some("get-sum"));
        assert!(!got.contains(&"echo".to_string()));
        assert_eq!(near_matches("ecoh", ["echo", "get-sum"]), ["echo"]);
        assert_eq!(near_matches("cty", ["city", "country"]), ["city"]);
    }
}
