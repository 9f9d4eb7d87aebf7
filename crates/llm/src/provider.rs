//! The provider trait: one required method that streams events. Collecting a whole answer,
//! retrying transient failures and the shared HTTP plumbing are built on top of it here, so
//! each wire format only has to translate requests and parse its stream.

use std::pin::Pin;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tether_protocol::chat::{Message, ToolCall, ToolDefinition, Usage};

use crate::error::{LlmError, classify, retry_after_header};

/// Whether and how the model should call tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call a tool.
    Required,
    /// The model must not call tools.
    None,
}

/// One request to a model.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The conversation so far, system message first.
    pub messages: Vec<Message>,
    /// Tools offered natively (empty in prompt-based mode).
    pub tools: Vec<ToolDefinition>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Cap on generated tokens.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A natural end of the answer.
    EndTurn,
    /// It wants tools called.
    ToolCalls,
    /// It hit the token limit.
    MaxTokens,
    /// Anything else the provider said.
    Other(String),
}

/// One streamed piece of an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More answer text.
    TextDelta(String),
    /// A piece of tool call `index`: its id and name arrive once, arguments in fragments.
    ToolCallDelta {
        /// Position of the call in this answer.
        index: usize,
        /// Call id, when this fragment carries it.
        id: Option<String>,
        /// Tool name, when this fragment carries it.
        name: Option<String>,
        /// A fragment of the JSON arguments.
        arguments: String,
    },
    /// Token counts (may arrive more than once; later values win per field).
    Usage(Usage),
    /// The answer is complete.
    Stop(StopReason),
}

/// A stream of events for one answer.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>;

/// A model behind some wire format.
pub trait Provider: Send + Sync {
    /// `provider:model`, for messages.
    fn name(&self) -> &str;

    /// Starts an answer. Errors before the first event (HTTP status, connection) come back
    /// here so they can be retried; errors mid-stream come through the stream.
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, LlmError>>;

    /// Whether tool results may carry images for this provider.
    fn accepts_tool_images(&self) -> bool {
        false
    }

    /// The model's context window in tokens, when the provider knows it.
    fn context_window(&self) -> Option<usize> {
        None
    }
}

/// A whole answer, collected from the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The text.
    pub text: String,
    /// Tool calls in order.
    pub tool_calls: Vec<ToolCall>,
    /// Token counts.
    pub usage: Usage,
    /// Why it stopped.
    pub stop_reason: StopReason,
}

/// Folds stream events into a [`ChatResponse`]; feed it events in order.
#[derive(Debug, Default)]
pub struct ResponseBuilder {
    text: String,
    calls: Vec<(Option<String>, String, String)>,
    usage: Usage,
    stop: Option<StopReason>,
}

impl ResponseBuilder {
    /// Applies one event.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta(text) => self.text.push_str(text),
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => {
                while self.calls.len() <= *index {
                    self.calls.push((None, String::new(), String::new()));
                }
                let call = &mut self.calls[*index];
                if let Some(id) = id {
                    call.0 = Some(id.clone());
                }
                if let Some(name) = name {
                    call.1.push_str(name);
                }
                call.2.push_str(arguments);
            }
            StreamEvent::Usage(usage) => {
                if usage.input_tokens > 0 {
                    self.usage.input_tokens = usage.input_tokens;
                }
                if usage.output_tokens > 0 {
                    self.usage.output_tokens = usage.output_tokens;
                }
            }
            StreamEvent::Stop(reason) => self.stop = Some(reason.clone()),
        }
    }

    /// The collected answer. Calls without an id get `call_N`.
    pub fn finish(self) -> ChatResponse {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .enumerate()
            .filter(|(_, (_, name, _))| !name.is_empty())
            .map(|(i, (id, name, arguments))| ToolCall {
                id: id.unwrap_or_else(|| format!("call_{i}")),
                name,
                arguments: if arguments.trim().is_empty() {
                    "{}".into()
                } else {
                    arguments
                },
            })
            .collect();
        let stop_reason = self.stop.unwrap_or(if tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolCalls
        });
        ChatResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
            stop_reason,
        }
    }
}

/// Runs a request to completion without streaming to anyone.
pub async fn complete(
    provider: &dyn Provider,
    request: &ChatRequest,
) -> Result<ChatResponse, LlmError> {
    let mut stream = provider.stream(request).await?;
    let mut builder = ResponseBuilder::default();
    while let Some(event) = stream.next().await {
        builder.push(&event?);
    }
    Ok(builder.finish())
}

/// How transient failures are retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub max_retries: u32,
    /// First backoff; doubles each time.
    pub base_delay: Duration,
    /// Longest wait, also for `retry-after`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// How long to wait before attempt `attempt` (1-based) after `error`, or `None` to give up.
    pub fn delay(&self, attempt: u32, error: &LlmError) -> Option<Duration> {
        if attempt > self.max_retries {
            return None;
        }
        let hinted = error.retry_after()?;
        let backoff = self.base_delay.saturating_mul(1 << (attempt - 1).min(10));
        Some(hinted.unwrap_or(backoff).min(self.max_delay))
    }
}

/// Shared HTTP settings of the wire formats.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Provider name for messages.
    pub provider: String,
    /// Env var holding the key, named in auth errors.
    pub key_env: Option<String>,
    /// Time to connect and receive response headers.
    pub request_timeout: Duration,
    /// Longest silence between two chunks of a stream.
    pub idle_timeout: Duration,
}

/// Builds the one HTTP client a provider uses.
pub fn http_client() -> Result<reqwest::Client, LlmError> {
    // Fails only when a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))
}

/// POSTs JSON and returns the response if its status is a success, else a classified error.
pub async fn post_json(
    client: &reqwest::Client,
    settings: &HttpSettings,
    url: &str,
    headers: &[(&str, String)],
    body: &serde_json::Value,
) -> Result<reqwest::Response, LlmError> {
    let mut builder = client.post(url).json(body);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let response = tokio::time::timeout(settings.request_timeout, builder.send())
        .await
        .map_err(|_| LlmError::Transport {
            provider: settings.provider.clone(),
            message: format!(
                "no response from {url} within {}s",
                settings.request_timeout.as_secs()
            ),
        })?
        .map_err(|e| LlmError::Transport {
            provider: settings.provider.clone(),
            message: format!("cannot reach {url}: {}", error_chain(&e)),
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after_header(response.headers());
    let body = tokio::time::timeout(settings.request_timeout, response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Err(classify(
        &settings.provider,
        status.as_u16(),
        retry_after,
        &body,
        settings.key_env.as_deref(),
    ))
}

/// The response body as a byte stream whose silences are bounded by the idle timeout.
pub fn body_stream(
    response: reqwest::Response,
    settings: &HttpSettings,
) -> impl Stream<Item = Result<bytes::Bytes, LlmError>> + Send + 'static {
    let provider = settings.provider.clone();
    let idle = settings.idle_timeout;
    let inner = Box::pin(response.bytes_stream());
    futures::stream::unfold((inner, false), move |(mut inner, finished)| {
        let provider = provider.clone();
        async move {
            if finished {
                return None;
            }
            let item = match tokio::time::timeout(idle, inner.next()).await {
                Err(_) => Err(LlmError::Transport {
                    provider,
                    message: format!("the stream stalled for {}s", idle.as_secs()),
                }),
                Ok(None) => return None,
                Ok(Some(Err(e))) => Err(LlmError::Transport {
                    provider,
                    message: format!("the stream broke: {}", error_chain(&e)),
                }),
                Ok(Some(Ok(bytes))) => Ok(bytes),
            };
            let stop = item.is_err();
            Some((item, (inner, stop)))
        }
    })
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
