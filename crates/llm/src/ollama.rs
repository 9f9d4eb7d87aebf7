//! Ollama's native chat API (`POST {base}/api/chat`, newline-delimited JSON stream). Tool
//! calls arrive whole, with arguments as objects and no ids, so ids are assigned here.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tether_protocol::chat::{Message, Usage};

use crate::decode::{LineSplitter, decode_body};
use crate::error::LlmError;
use crate::provider::{
    ChatRequest, EventStream, HttpSettings, Provider, StopReason, StreamEvent, body_stream,
    http_client, post_json,
};
use crate::schema::provider_schema;

/// A model served by Ollama.
pub struct OllamaProvider {
    name: String,
    model: String,
    base_url: String,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl OllamaProvider {
    /// A provider for `model` at `base_url` (e.g. `http://localhost:11434`).
    pub fn new(
        name: String,
        model: String,
        base_url: String,
        settings: HttpSettings,
    ) -> Result<OllamaProvider, LlmError> {
        let base_url = base_url
            .trim_end_matches('/')
            .trim_end_matches("/api")
            .to_string();
        Ok(OllamaProvider {
            name,
            model,
            base_url,
            settings,
            client: http_client()?,
        })
    }

    /// The JSON body for a request.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| match m {
                Message::System { content } => json!({"role": "system", "content": content}),
                Message::User { content } => json!({"role": "user", "content": content}),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut v = json!({"role": "assistant", "content": content});
                    if !tool_calls.is_empty() {
                        v["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                let arguments = serde_json::from_str::<Value>(&c.arguments)
                                    .ok()
                                    .filter(Value::is_object)
                                    .unwrap_or_else(|| json!({}));
                                json!({"function": {"name": c.name, "arguments": arguments}})
                            })
                            .collect();
                    }
                    v
                }
                Message::Tool {
                    name,
                    content,
                    images,
                    ..
                } => {
                    let mut v = json!({"role": "tool", "tool_name": name, "content": content});
                    if !images.is_empty() {
                        v["images"] = images.iter().map(|i| json!(i.data)).collect();
                    }
                    v
                }
            })
            .collect();
        let mut body = json!({"model": self.model, "messages": messages, "stream": true});
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": provider_schema(&t.parameters)}}))
                .collect();
        }
        let mut options = serde_json::Map::new();
        if let Some(t) = request.temperature {
            options.insert("temperature".into(), json!(t));
        }
        if let Some(max) = request.max_tokens {
            options.insert("num_predict".into(), json!(max));
        }
        if !options.is_empty() {
            body["options"] = Value::Object(options);
        }
        body
    }
}

impl Provider for OllamaProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn accepts_tool_images(&self) -> bool {
        true
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, LlmError>> {
        Box::pin(async move {
            let url = format!("{}/api/chat", self.base_url);
            let response = post_json(
                &self.client,
                &self.settings,
                &url,
                &[],
                &self.request_body(request),
            )
            .await?;
            let provider = self.name.clone();
            let mut lines = LineSplitter::default();
            let mut calls = 0usize;
            Ok(decode_body(
                body_stream(response, &self.settings),
                move |chunk| {
                    let mut events = Vec::new();
                    for line in lines.feed(chunk) {
                        if line.trim().is_empty() {
                            continue;
                        }
                        let value: Value =
                            serde_json::from_str(&line).map_err(|e| LlmError::InvalidResponse {
                                provider: provider.clone(),
                                message: format!("stream line is not JSON ({e}): {line}"),
                            })?;
                        if let Some(error) = value["error"].as_str() {
                            return Err(LlmError::Server {
                                provider: provider.clone(),
                                status: 200,
                                message: error.to_string(),
                            });
                        }
                        if let Some(text) = value
                            .pointer("/message/content")
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                        {
                            events.push(StreamEvent::TextDelta(text.to_string()));
                        }
                        for call in value
                            .pointer("/message/tool_calls")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            events.push(StreamEvent::ToolCallDelta {
                                index: calls,
                                id: Some(format!("call_{calls}")),
                                name: call
                                    .pointer("/function/name")
                                    .and_then(Value::as_str)
                                    .map(str::to_string),
                                arguments: call
                                    .pointer("/function/arguments")
                                    .map(|a| match a {
                                        Value::String(s) => s.clone(),
                                        other => other.to_string(),
                                    })
                                    .unwrap_or_else(|| "{}".into()),
                            });
                            calls += 1;
                        }
                        if value["done"] == json!(true) {
                            events.push(StreamEvent::Usage(Usage {
                                input_tokens: value["prompt_eval_count"].as_u64().unwrap_or(0),
                                output_tokens: value["eval_count"].as_u64().unwrap_or(0),
                            }));
                            events.push(StreamEvent::Stop(match value["done_reason"].as_str() {
                                Some("length") => StopReason::MaxTokens,
                                _ if calls > 0 => StopReason::ToolCalls,
                                _ => StopReason::EndTurn,
                            }));
                        }
                    }
                    Ok(events)
                },
            ))
        })
    }
}
