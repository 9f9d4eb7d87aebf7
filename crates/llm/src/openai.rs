//! The OpenAI-compatible Chat Completions wire format (`POST {base}/chat/completions`,
//! streaming SSE), used by OpenAI, Groq, OpenRouter, DeepSeek, vLLM, LM Studio, llama.cpp's
//! server and Ollama's `/v1`. One engine; the presets in `presets.rs` are data.

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

/// A model served over the Chat Completions API.
pub struct OpenAiProvider {
    name: String,
    model: String,
    base_url: String,
    api_key: Option<String>,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// A provider for `model` at `base_url` (ending in `/v1` or similar).
    pub fn new(
        name: String,
        model: String,
        base_url: String,
        api_key: Option<String>,
        settings: HttpSettings,
    ) -> Result<OpenAiProvider, LlmError> {
        Ok(OpenAiProvider {
            name,
            model,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            settings,
            client: http_client()?,
        })
    }

    /// The JSON body for a request; public so tests can compare it byte for byte.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": provider_schema(&t.parameters),
                    }})
                })
                .collect();
            body["tool_choice"] = json!(match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Required => "required",
                ToolChoice::None => "none",
            });
        }
        if let Some(max) = request.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        body
    }
}

fn message_json(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            // `content` stays a string even with tool calls: some servers (llama-cpp-python)
            // reject null.
            let mut m = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                m["tool_calls"] = tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            m
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => {
            json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
        }
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, LlmError>> {
        Box::pin(async move {
            let url = format!("{}/chat/completions", self.base_url);
            let mut headers = Vec::new();
            if let Some(key) = &self.api_key {
                headers.push(("authorization", format!("Bearer {key}")));
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
            Ok(decode_body(
                body_stream(response, &self.settings),
                move |chunk| {
                    let mut events = Vec::new();
                    for event in sse.feed(chunk) {
                        if event.data.trim() == "[DONE]" {
                            continue;
                        }
                        let value: Value = serde_json::from_str(&event.data).map_err(|e| {
                            LlmError::InvalidResponse {
                                provider: provider.clone(),
                                message: format!("stream chunk is not JSON ({e}): {}", event.data),
                            }
                        })?;
                        parse_chunk(&provider, &value, &mut events)?;
                    }
                    Ok(events)
                },
            ))
        })
    }
}

fn parse_chunk(
    provider: &str,
    chunk: &Value,
    events: &mut Vec<StreamEvent>,
) -> Result<(), LlmError> {
    if let Some(error) = chunk.get("error") {
        let message = crate::error::error_message(&json!({"error": error}).to_string());
        return Err(LlmError::Server {
            provider: provider.to_string(),
            status: 200,
            message,
        });
    }
    if let Some(choice) = chunk.pointer("/choices/0") {
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str()
            && !text.is_empty()
        {
            events.push(StreamEvent::TextDelta(text.to_string()));
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for (position, call) in calls.iter().enumerate() {
                events.push(StreamEvent::ToolCallDelta {
                    index: call["index"]
                        .as_u64()
                        .map(|i| i as usize)
                        .unwrap_or(position),
                    id: call["id"].as_str().map(str::to_string),
                    name: call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    arguments: call
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            events.push(StreamEvent::Stop(match reason {
                "stop" => StopReason::EndTurn,
                "tool_calls" | "function_call" => StopReason::ToolCalls,
                "length" => StopReason::MaxTokens,
                other => StopReason::Other(other.to_string()),
            }));
        }
    }
    if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
        events.push(StreamEvent::Usage(Usage {
            input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
            output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_become_events() {
        let mut events = Vec::new();
        let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "x__y", "arguments": "{\"a\""}}
        ]}, "finish_reason": null}]});
        parse_chunk("p", &chunk, &mut events).unwrap();
        assert_eq!(
            events,
            vec![StreamEvent::ToolCallDelta {
                index: 1,
                id: Some("call_b".into()),
                name: Some("x__y".into()),
                arguments: "{\"a\"".into()
            }]
        );
        let err = parse_chunk(
            "p",
            &json!({"error": {"message": "overloaded"}}),
            &mut events,
        )
        .unwrap_err();
        assert!(err.to_string().contains("overloaded"));
    }
}
