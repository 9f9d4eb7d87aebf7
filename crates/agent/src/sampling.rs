//! Answers a server's `sampling/createMessage` with the user's model: MCP's sampling
//! messages (text, tool use, tool results) become a chat request, and the model's answer
//! becomes a `CreateMessageResult`. Consent is the front end's job; this is only the
//! translation and the model call.

use serde_json::{Value, json};
use tether_llm::{ChatRequest, Provider, StopReason, ToolChoice, complete};
use tether_protocol::chat::{Message, ToolCall, ToolDefinition};

/// Most tokens a server may ask for, whatever its `maxTokens` says.
const MAX_SAMPLING_TOKENS: u32 = 4096;

/// Builds the chat request a sampling request describes, or says what is wrong with it.
pub fn sampling_request(params: &Value) -> Result<ChatRequest, String> {
    let mut messages = Vec::new();
    if let Some(system) = params.get("systemPrompt").and_then(Value::as_str) {
        messages.push(Message::system(system));
    }
    let wire_messages = params
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("sampling request has no \"messages\" array")?;
    for (index, message) in wire_messages.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        let blocks = match message.get("content") {
            Some(Value::Array(blocks)) => blocks.clone(),
            Some(block) => vec![block.clone()],
            None => return Err(format!("sampling message {index} has no \"content\"")),
        };
        let mut text = Vec::new();
        let mut tool_calls = Vec::new();
        for block in &blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => text.push(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                ),
                Some("tool_use") => tool_calls.push(ToolCall {
                    id: string(block, "id"),
                    name: string(block, "name"),
                    arguments: block.get("input").cloned().unwrap_or(json!({})).to_string(),
                }),
                Some("tool_result") => messages.push(Message::Tool {
                    tool_call_id: string(block, "toolUseId"),
                    name: String::new(),
                    content: block_text(block.get("content")),
                    images: Vec::new(),
                    is_error: block
                        .get("isError")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                }),
                Some(other) => text.push(format!("[{other} content omitted]")),
                None => {
                    return Err(format!(
                        "sampling message {index} has a block without \"type\""
                    ));
                }
            }
        }
        let text = text.join("\n");
        match role {
            "assistant" => messages.push(Message::Assistant {
                content: text,
                tool_calls,
            }),
            _ if text.is_empty() => {}
            _ => messages.push(Message::user(text)),
        }
    }
    let tools = params
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .map(|tool| ToolDefinition {
                    name: string(tool, "name"),
                    description: string(tool, "description"),
                    parameters: tool
                        .get("inputSchema")
                        .cloned()
                        .unwrap_or(json!({"type": "object"})),
                })
                .collect()
        })
        .unwrap_or_default();
    let tool_choice = match params.pointer("/toolChoice/mode").and_then(Value::as_str) {
        Some("required") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        _ => ToolChoice::Auto,
    };
    let max_tokens = params
        .get("maxTokens")
        .and_then(Value::as_u64)
        .map(|n| n.min(u64::from(MAX_SAMPLING_TOKENS)) as u32)
        .unwrap_or(MAX_SAMPLING_TOKENS);
    Ok(ChatRequest {
        messages,
        tools,
        tool_choice,
        max_tokens: Some(max_tokens),
        temperature: params
            .get("temperature")
            .and_then(Value::as_f64)
            .map(|t| t as f32),
    })
}

/// Runs the sampling request on `provider` and returns MCP's `CreateMessageResult`.
pub async fn answer_sampling(provider: &dyn Provider, params: &Value) -> Result<Value, String> {
    let request = sampling_request(params)?;
    let response = complete(provider, &request)
        .await
        .map_err(|e| format!("the model could not answer: {e}"))?;
    let model = provider.name().to_string();
    if !response.tool_calls.is_empty() {
        let content: Vec<Value> = response
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": serde_json::from_str::<Value>(&call.arguments).unwrap_or(json!({})),
                })
            })
            .collect();
        return Ok(
            json!({"role": "assistant", "content": content, "model": model, "stopReason": "toolUse"}),
        );
    }
    let stop = match response.stop_reason {
        StopReason::MaxTokens => "maxTokens",
        _ => "endTurn",
    };
    Ok(json!({
        "role": "assistant",
        "content": {"type": "text", "text": response.text},
        "model": model,
        "stopReason": stop,
    }))
}

/// The text of a sampling request, for showing it to the user before consenting.
pub fn describe_sampling(params: &Value) -> String {
    let mut lines = Vec::new();
    if let Some(system) = params.get("systemPrompt").and_then(Value::as_str) {
        lines.push(format!("system: {system}"));
    }
    for message in params
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        lines.push(format!("{role}: {}", block_text(message.get("content"))));
    }
    lines.join("\n")
}

fn string(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The text of one content block or a list of them.
fn block_text(content: Option<&Value>) -> String {
    let blocks = match content {
        Some(Value::Array(blocks)) => blocks.iter().collect::<Vec<_>>(),
        Some(block) => vec![block],
        None => Vec::new(),
    };
    blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => string(b, "text"),
            Some(other) => format!("[{other}]"),
            None => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_messages_become_a_chat_request() {
        let params = json!({
            "systemPrompt": "Be brief.",
            "maxTokens": 100000,
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "weather?"}},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "toolUseId": "t1", "content": [{"type": "text", "text": "sunny"}]}]}
            ],
            "tools": [{"name": "get_weather", "inputSchema": {"type": "object"}}],
            "toolChoice": {"mode": "required"}
        });
        let request = sampling_request(&params).unwrap();
        assert_eq!(request.max_tokens, Some(MAX_SAMPLING_TOKENS));
        assert_eq!(request.tool_choice, ToolChoice::Required);
        assert_eq!(request.tools[0].name, "get_weather");
        assert_eq!(request.messages[0], Message::system("Be brief."));
        assert_eq!(request.messages[1], Message::user("weather?"));
        let Message::Assistant { tool_calls, .. } = &request.messages[2] else {
            panic!(
                "expected the assistant's tool use, got {:?}",
                request.messages[2]
            );
        };
        assert_eq!(tool_calls[0].arguments, r#"{"city":"Paris"}"#);
        let Message::Tool {
            tool_call_id,
            content,
            ..
        } = &request.messages[3]
        else {
            panic!("expected a tool result");
        };
        assert_eq!((tool_call_id.as_str(), content.as_str()), ("t1", "sunny"));
    }

    #[test]
    fn a_request_without_messages_is_refused() {
        let error = sampling_request(&json!({"maxTokens": 10})).unwrap_err();
        assert!(error.contains("messages"), "{error}");
    }
}
