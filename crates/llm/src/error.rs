//! Typed provider errors. Each kind documents whether the loop retries it, and HTTP failures
//! are classified from status and body the same way for every wire format.

use std::time::Duration;

/// What can go wrong talking to a model.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The key is missing, wrong or lacks permission. Not retried.
    #[error("{provider}: authentication failed: {message}{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    Auth {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
        /// How to fix it, e.g. which variable to set.
        hint: Option<String>,
    },
    /// Too many requests. Retried after `retry_after` when given, else with backoff.
    #[error("{provider}: rate limited: {message}")]
    RateLimited {
        /// Provider name.
        provider: String,
        /// The server's `retry-after`, when it sent one.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The conversation no longer fits the model's context window. Not retried.
    #[error("{provider}: the conversation is longer than the model's context window: {message}")]
    ContextWindow {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// The model or endpoint does not support native tool calling. Not retried; the loop
    /// switches to prompt-based tool calling instead.
    #[error("{provider}: the model does not accept native tools: {message}")]
    ToolsUnsupported {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// The provider failed (5xx, overloaded). Retried with backoff.
    #[error("{provider}: server error {status}: {message}")]
    Server {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider rejected the request. Not retried; its message is shown.
    #[error("{provider}: request rejected ({status}): {message}")]
    BadRequest {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The connection failed or dropped. Retried with backoff when nothing was streamed yet.
    #[error("{provider}: {message}")]
    Transport {
        /// Provider name.
        provider: String,
        /// What happened.
        message: String,
    },
    /// The provider answered something we cannot parse. Not retried.
    #[error("{provider}: unexpected response: {message}")]
    InvalidResponse {
        /// Provider name.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// The model string or settings are wrong. Not retried.
    #[error("{0}")]
    Config(String),
}

impl LlmError {
    /// Whether the call may succeed if repeated, and after how long at least.
    pub fn retry_after(&self) -> Option<Option<Duration>> {
        match self {
            LlmError::RateLimited { retry_after, .. } => Some(*retry_after),
            LlmError::Server { .. } | LlmError::Transport { .. } => Some(None),
            _ => None,
        }
    }
}

/// Pulls the human message out of a provider's error body (`{"error": {"message": …}}`,
/// `{"error": "…"}`, `{"message": …}`), else returns the body itself, shortened.
pub fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(|m| m.as_str())
            .map(str::to_string)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_string());
    let mut short: String = text.chars().take(500).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    if short.is_empty() {
        "(empty body)".into()
    } else {
        short
    }
}

fn mentions(body: &str, needles: &[&str]) -> bool {
    let lower = body.to_lowercase();
    needles.iter().any(|n| lower.contains(n))
}

/// Classifies a failed HTTP response.
pub fn classify(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
    key_env: Option<&str>,
) -> LlmError {
    let provider = provider.to_string();
    let message = error_message(body);
    let context = mentions(
        body,
        &[
            "context_length_exceeded",
            "maximum context length",
            "context window",
            "prompt is too long",
            "too many tokens",
            "context length",
        ],
    );
    let no_tools = mentions(
        body,
        &[
            "does not support tools",
            "tools is not supported",
            "tool use is not supported",
            "does not support function",
            "tool_choice is not supported",
            "tools are not supported",
        ],
    );
    match status {
        401 | 403 => LlmError::Auth {
            provider,
            message,
            hint: key_env.map(|k| format!("check {k}")),
        },
        429 => LlmError::RateLimited {
            provider,
            retry_after,
            message,
        },
        400 | 404 | 413 | 422 if context => LlmError::ContextWindow { provider, message },
        400 | 404 | 422 | 501 if no_tools => LlmError::ToolsUnsupported { provider, message },
        500..=599 => LlmError::Server {
            provider,
            status,
            message,
        },
        _ => LlmError::BadRequest {
            provider,
            status,
            message,
        },
    }
}

/// Reads `retry-after-ms` or `retry-after` (seconds) from response headers.
pub fn retry_after_header(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let read = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    // A hostile or broken header (`1e30`, `NaN`) must not panic: such a wait is no hint.
    let seconds = match read("retry-after-ms") {
        Some(ms) => ms / 1000.0,
        None => read("retry-after")?,
    };
    Duration::try_from_secs_f64(seconds.max(0.0)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absurd_retry_after_is_ignored_not_a_panic() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("retry-after", "1e30".parse().unwrap());
        assert_eq!(retry_after_header(&headers), None);
        headers.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(
            retry_after_header(&headers),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn statuses_map_to_kinds() {
        let ctx = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            classify("p", 400, None, ctx, None),
            LlmError::ContextWindow { .. }
        ));
        assert!(
            matches!(classify("p", 401, None, "{}", Some("OPENAI_API_KEY")), LlmError::Auth { hint: Some(h), .. } if h == "check OPENAI_API_KEY")
        );
        assert!(matches!(
            classify("p", 429, Some(Duration::from_secs(2)), "{}", None),
            LlmError::RateLimited {
                retry_after: Some(_),
                ..
            }
        ));
        assert!(matches!(
            classify("p", 503, None, "down", None),
            LlmError::Server { status: 503, .. }
        ));
        assert!(matches!(
            classify(
                "p",
                400,
                None,
                r#"{"error":"registry.ollama.ai/library/gemma does not support tools"}"#,
                None
            ),
            LlmError::ToolsUnsupported { .. }
        ));
        let bad = classify(
            "p",
            400,
            None,
            r#"{"error":{"message":"Invalid 'messages[1].role'"}}"#,
            None,
        );
        assert_eq!(
            bad.to_string(),
            "p: request rejected (400): Invalid 'messages[1].role'"
        );
        assert!(bad.retry_after().is_none());
    }
}
