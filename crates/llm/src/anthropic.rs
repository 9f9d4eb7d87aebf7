//! The Anthropic Messages wire format (`POST {base}/v1/messages`, streaming SSE): system
//! prompt as a field, `tool_use` blocks in assistant turns, `tool_result` blocks (with images)
//! in the following user turn.

use std::collections::HashMap;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tether_protocol::chat::{Message, Usage};

use crate::decode::{SseDecoder, decode_body};
use crate::error::LlmError;
use crate::provider::{
    ChatRequest, EventStream, HttpSettings, Provider, StopReason, StreamEvent, ToolChoice,
    body_stream, http_client, post_json,
};
use crate::schema::provider_schema;

const API_VERSION: &str = "2023-06-01";
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A Claude model over the Messages API.
pub struct AnthropicProvider {
    name: String,
    model: String,
    base_url: String,
    api_key: Option<String>,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl AnthropicProvider {
    /// A provider for `model` at `base_url` (e.g. `https://api.anthropic.com`).
    pub fn new(
        name: String,
        model: String,
        base_url: String,
        api_key: Option<String>,
        settings: HttpSettings,
    ) -> Result<AnthropicProvider, LlmError> {
        let base_url = base_url
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_string();
        Ok(AnthropicProvider {
            name,
            model,
            base_url,
            api_key,
            settings,
            client: http_client()?,
        })
    }

    /// The JSON body for a request.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut system = Vec::new();
        let mut messages: Vec<Value> = Vec::new();
        for message in &request.messages {
            let (role, blocks) = match message {
                Message::System { content } => {
                    system.push(content.clone());
                    continue;
                }
                Message::User { content } => {
                    ("user", vec![json!({"type": "text", "text": content})])
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut blocks = Vec::new();
                    if !content.is_empty() {
                        blocks.push(json!({"type": "text", "text": content}));
                    }
                    for call in tool_calls {
                        // Arguments the model sent as invalid JSON are kept as a string field,
                        // so the history stays faithful and the API still accepts the object.
                        let input = match serde_json::from_str::<Value>(&call.arguments) {
                            Ok(Value::Object(map)) => Value::Object(map),
                            _ => json!({"_raw_arguments": call.arguments}),
                        };
                        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    ("assistant", blocks)
                }
                Message::Tool {
                    tool_call_id,
                    content,
                    images,
                    is_error,
                    ..
                } => {
                    let mut parts = vec![json!({"type": "text", "text": content})];
                    for image in images {
                        parts.push(json!({"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}}));
                    }
                    let mut block = json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": parts});
                    if *is_error {
                        block["is_error"] = json!(true);
                    }
                    ("user", vec![block])
                }
            };
            // Consecutive turns of one role merge: all tool results of a step go in one user turn.
            match messages.last_mut() {
                Some(last) if last["role"] == role => {
                    if let Some(content) = last["content"].as_array_mut() {
                        content.extend(blocks);
                    }
                }
                _ => messages.push(json!({"role": role, "content": blocks})),
            }
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": provider_schema(&t.parameters)}))
                .collect();
            body["tool_choice"] = json!({"type": match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Required => "any",
                ToolChoice::None => "none",
            }});
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        body
    }
}

impl Provider for AnthropicProvider {
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
            let url = format!("{}/v1/messages", self.base_url);
            let mut headers = vec![("anthropic-version", API_VERSION.to_string())];
            if let Some(key) = &self.api_key {
                headers.push(("x-api-key", key.clone()));
            }
            let response = post_json(
                &self.client,
                &self.settings,
                &url,
                &headers,
                &self.request_body(request),
            )
            .await?;
            let provider = self.name.clone();
            let mut sse = SseDecoder::default();
            // Content block index → tool call index.
            let mut tool_blocks: HashMap<u64, usize> = HashMap::new();
            Ok(decode_body(
                body_stream(response, &self.settings),
                move |chunk| {
                    let mut events = Vec::new();
                    for event in sse.feed(chunk) {
                        let value: Value = serde_json::from_str(&event.data).map_err(|e| {
                            LlmError::InvalidResponse {
                                provider: provider.clone(),
                                message: format!("stream event is not JSON ({e}): {}", event.data),
                            }
                        })?;
                        parse_event(&provider, &value, &mut tool_blocks, &mut events)?;
                    }
                    Ok(events)
                },
            ))
        })
    }
}

fn parse_event(
    provider: &str,
    event: &Value,
    tool_blocks: &mut HashMap<u64, usize>,
    events: &mut Vec<StreamEvent>,
) -> Result<(), LlmError> {
    let index = event["index"].as_u64().unwrap_or(0);
    match event["type"].as_str().unwrap_or_default() {
        "message_start" => {
            let usage = &event["message"]["usage"];
            events.push(StreamEvent::Usage(Usage {
                input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
            }));
        }
        "content_block_start" => {
            let block = &event["content_block"];
            if block["type"] == "tool_use" {
                let call = tool_blocks.len();
                tool_blocks.insert(index, call);
                events.push(StreamEvent::ToolCallDelta {
                    index: call,
                    id: block["id"].as_str().map(str::to_string),
                    name: block["name"].as_str().map(str::to_string),
                    arguments: String::new(),
                });
            } else if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                events.push(StreamEvent::TextDelta(text.to_string()));
            }
        }
        "content_block_delta" => {
            let delta = &event["delta"];
            match delta["type"].as_str().unwrap_or_default() {
                "text_delta" => events.push(StreamEvent::TextDelta(
                    delta["text"].as_str().unwrap_or("").to_string(),
                )),
                "input_json_delta" => {
                    if let Some(&call) = tool_blocks.get(&index) {
                        events.push(StreamEvent::ToolCallDelta {
                            index: call,
                            id: None,
                            name: None,
                            arguments: delta["partial_json"].as_str().unwrap_or("").to_string(),
                        });
                    }
                }
                _ => {}
            }
        }
        "message_delta" => {
            if let Some(output) = event
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
            {
                events.push(StreamEvent::Usage(Usage {
                    input_tokens: 0,
                    output_tokens: output,
                }));
            }
            if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                events.push(StreamEvent::Stop(match reason {
                    "end_turn" | "stop_sequence" => StopReason::EndTurn,
                    "tool_use" => StopReason::ToolCalls,
                    "max_tokens" => StopReason::MaxTokens,
                    other => StopReason::Other(other.to_string()),
                }));
            }
        }
        "error" => {
            let message = event
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string();
            let kind = event
                .pointer("/error/type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Err(match kind {
                "rate_limit_error" => LlmError::RateLimited {
                    provider: provider.to_string(),
                    retry_after: None,
                    message,
                },
                "invalid_request_error" if message.contains("too long") => {
                    LlmError::ContextWindow {
                        provider: provider.to_string(),
                        message,
                    }
                }
                _ => LlmError::Server {
                    provider: provider.to_string(),
                    status: 200,
                    message,
                },
            });
        }
        _ => {}
    }
    Ok(())
}
