//! Prompt-based tool calling for models without native tool support: the tools are described
//! in the system prompt, the model answers with JSON (`{"tool": …, "arguments": …}` as in the
//! MCP Python SDK's simple chatbot, or `<tool_call>` blocks, or fenced JSON), and results go
//! back as user messages the model can read. Parsing is lenient: common breakage (trailing
//! commas, single quotes, Python literals, missing closing braces) is repaired.

use serde_json::{Map, Value};
use tether_protocol::chat::{Message, ToolDefinition};

/// A call found in the model's text.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    /// Tool name as written.
    pub name: String,
    /// Arguments (always an object; a string holding JSON is decoded).
    pub arguments: Value,
}

/// The part of the system prompt that teaches the protocol and lists the tools.
pub fn tools_prompt(tools: &[ToolDefinition]) -> String {
    let mut text = String::from(
        "You can call tools. To call a tool, reply with only a JSON object and nothing else:\n\
         {\"tool\": \"<tool name>\", \"arguments\": {<arguments as the tool's schema says>}}\n\
         To call several tools at once, reply with a JSON array of such objects.\n\
         Each result comes back in a message that starts with \"Tool result\". When you have what \
         you need, answer the user in plain text without JSON.\n\nAvailable tools:\n",
    );
    for tool in tools {
        text.push_str(&format!(
            "- {}: {}\n  arguments schema: {}\n",
            tool.name,
            tool.description.trim(),
            serde_json::to_string(&tool.parameters).unwrap_or_default()
        ));
    }
    text
}

/// Rewrites a canonical conversation for a model that only knows text: assistant tool calls
/// stay as the text the model wrote, tool results become one user message per step.
pub fn render_history(messages: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for message in messages {
        match message {
            Message::Assistant { content, .. } => out.push(Message::assistant(content.clone())),
            Message::Tool {
                tool_call_id,
                name,
                content,
                is_error,
                ..
            } => {
                let label = if *is_error {
                    "Tool error"
                } else {
                    "Tool result"
                };
                let block = format!("{label} for {name} (call {tool_call_id}):\n{content}");
                match out.last_mut() {
                    Some(Message::User { content: previous }) if previous.starts_with("Tool ") => {
                        previous.push_str("\n\n");
                        previous.push_str(&block);
                    }
                    _ => out.push(Message::user(block)),
                }
            }
            other => out.push(other.clone()),
        }
    }
    out
}

/// Finds tool calls in a model's answer; empty when it is a plain answer.
pub fn parse_tool_calls(text: &str) -> Vec<ParsedCall> {
    let mut candidates: Vec<String> = Vec::new();
    // 1. <tool_call>…</tool_call> blocks (Qwen, Hermes style).
    let mut rest = text;
    while let Some(start) = rest.find("<tool_call>") {
        let after = &rest[start + "<tool_call>".len()..];
        let end = after.find("</tool_call>").unwrap_or(after.len());
        candidates.push(after[..end].to_string());
        rest = &after[end..];
    }
    // 2. Fenced code blocks.
    if candidates.is_empty() {
        let mut rest = text;
        while let Some(start) = rest.find("```") {
            let after = &rest[start + 3..];
            let body_start = after.find('\n').map(|n| n + 1).unwrap_or(0);
            let body = &after[body_start..];
            let end = body.find("```").unwrap_or(body.len());
            candidates.push(body[..end].to_string());
            rest = &body[(end + 3).min(body.len())..];
        }
    }
    // 3. The first JSON value in the text.
    if candidates.is_empty()
        && let Some(start) = text.find(['{', '['])
    {
        candidates.push(text[start..].to_string());
    }
    candidates
        .iter()
        .filter_map(|c| parse_lenient(c))
        .flat_map(|value| calls_in(&value))
        .collect()
}

fn calls_in(value: &Value) -> Vec<ParsedCall> {
    match value {
        Value::Array(items) => items.iter().flat_map(calls_in).collect(),
        Value::Object(map) => call_from_object(map).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn call_from_object(map: &Map<String, Value>) -> Option<ParsedCall> {
    // {"function": {"name", "arguments"}} (OpenAI shape written as text).
    if let Some(Value::Object(inner)) = map.get("function") {
        return call_from_object(inner);
    }
    let name = ["tool", "name", "tool_name"]
        .iter()
        .find_map(|k| map.get(*k)?.as_str())?;
    let arguments = ["arguments", "parameters", "args", "input"]
        .iter()
        .find_map(|k| map.get(*k))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let arguments = match arguments {
        Value::String(s) => parse_lenient(&s)
            .filter(Value::is_object)
            .unwrap_or(Value::String(s)),
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    Some(ParsedCall {
        name: name.to_string(),
        arguments,
    })
}

/// Parses JSON, repairing common model mistakes when the strict parse fails. Text after the
/// first complete value is ignored.
pub fn parse_lenient(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Some(value) = first_value(text) {
        return Some(value);
    }
    let mut repaired = text.to_string();
    if !repaired.contains('"') && repaired.contains('\'') {
        repaired = repaired.replace('\'', "\"");
    }
    repaired = replace_outside_strings(
        &repaired,
        &[("True", "true"), ("False", "false"), ("None", "null")],
    );
    repaired = remove_trailing_commas(&repaired);
    repaired = close_brackets(&repaired);
    first_value(&repaired)
}

fn first_value(text: &str) -> Option<Value> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value)) if value.is_object() || value.is_array() => Some(value),
        _ => None,
    }
}

/// Walks JSON-ish text, calling `f` with each char and whether it is inside a string.
fn walk(text: &str, mut f: impl FnMut(usize, char, bool)) {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        let was_in_string = in_string;
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
        f(i, c, was_in_string);
    }
}

fn replace_outside_strings(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut outside = vec![true; text.len() + 1];
    walk(text, |i, _, inside| outside[i] = !inside);
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < text.len() {
        if outside[i] {
            for (from, to) in pairs {
                let boundary_before = i == 0 || !text[..i].ends_with(|c: char| c.is_alphanumeric());
                if text[i..].starts_with(from)
                    && boundary_before
                    && !text[i + from.len()..].starts_with(|c: char| c.is_alphanumeric())
                {
                    out.push_str(to);
                    i += from.len();
                    continue 'scan;
                }
            }
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

fn remove_trailing_commas(text: &str) -> String {
    let mut drop = Vec::new();
    let chars: Vec<(usize, char, bool)> = {
        let mut v = Vec::new();
        walk(text, |i, c, inside| v.push((i, c, inside)));
        v
    };
    for (n, &(i, c, inside)) in chars.iter().enumerate() {
        if c == ',' && !inside {
            let next = chars[n + 1..].iter().find(|(_, c, _)| !c.is_whitespace());
            if matches!(next, Some((_, '}' | ']', _)) | None) {
                drop.push(i);
            }
        }
    }
    text.char_indices()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, c)| c)
        .collect()
}

fn close_brackets(text: &str) -> String {
    let mut stack = Vec::new();
    let mut in_string_at_end = false;
    walk(text, |_, c, inside| {
        if !inside {
            match c {
                '{' => stack.push('}'),
                '[' => stack.push(']'),
                '}' | ']' => {
                    stack.pop();
                }
                _ => {}
            }
        }
    });
    walk(text, |_, c, inside| {
        in_string_at_end = (inside && c != '"') || (!inside && c == '"')
    });
    let mut out = text.trim_end().to_string();
    if in_string_at_end {
        out.push('"');
    }
    while let Some(close) = stack.pop() {
        out.push(close);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> ParsedCall {
        let calls = parse_tool_calls(text);
        assert_eq!(calls.len(), 1, "{text} → {calls:?}");
        calls.into_iter().next().unwrap()
    }

    #[test]
    fn seed_note_shape_and_variants() {
        let c = one(r#"{"tool": "everything__get-sum", "arguments": {"a": 2, "b": 3}}"#);
        assert_eq!(
            (c.name.as_str(), c.arguments.clone()),
            ("everything__get-sum", json!({"a": 2, "b": 3}))
        );
        let c = one(
            "Sure!\n<tool_call>\n{\"name\": \"t__x\", \"arguments\": {\"q\": \"hi\"}}\n</tool_call>",
        );
        assert_eq!(c.name, "t__x");
        let c = one(
            "I'll call it:\n```json\n{\"tool\": \"t__x\", \"arguments\": \"{\\\"q\\\": 1}\"}\n```\nDone.",
        );
        assert_eq!(
            c.arguments,
            json!({"q": 1}),
            "arguments given as a JSON string are decoded"
        );
        let c = one(r#"{"function": {"name": "t__y", "arguments": {}}}"#);
        assert_eq!(c.name, "t__y");
        let calls = parse_tool_calls(r#"[{"tool": "a__x", "arguments": {}}, {"tool": "b__y"}]"#);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].arguments, json!({}));
    }

    #[test]
    fn common_breakage_is_repaired() {
        assert_eq!(
            one(r#"{"tool": "a__x", "arguments": {"n": 1,},}"#).arguments,
            json!({"n": 1})
        );
        assert_eq!(
            one("{'tool': 'a__x', 'arguments': {'flag': True, 'v': None}}").arguments,
            json!({"flag": true, "v": null})
        );
        assert_eq!(
            one(r#"{"tool": "a__x", "arguments": {"path": "a.txt"#).arguments,
            json!({"path": "a.txt"})
        );
        assert_eq!(
            one(r#"{"tool": "a__x", "arguments": {"s": "True, None"}}"#).arguments,
            json!({"s": "True, None"})
        );
    }

    #[test]
    fn plain_answers_have_no_calls() {
        assert!(parse_tool_calls("The answer is 5.").is_empty());
        assert!(parse_tool_calls("Use {braces} carefully").is_empty());
        assert!(parse_tool_calls("{\"answer\": 5}").is_empty());
    }

    #[test]
    fn history_for_text_only_models() {
        let history = vec![
            Message::user("q"),
            Message::Assistant {
                content: "{\"tool\": \"a__x\"}".into(),
                tool_calls: vec![],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                name: "a__x".into(),
                content: "5".into(),
                images: vec![],
                is_error: false,
            },
            Message::Tool {
                tool_call_id: "c2".into(),
                name: "a__y".into(),
                content: "bad".into(),
                images: vec![],
                is_error: true,
            },
        ];
        let rendered = render_history(&history);
        assert_eq!(rendered.len(), 3);
        let Message::User { content } = &rendered[2] else {
            panic!()
        };
        assert_eq!(
            content,
            "Tool result for a__x (call c1):\n5\n\nTool error for a__y (call c2):\nbad"
        );
    }

    proptest::proptest! {
        /// A model can write anything; reading calls out of it never panics.
        #[test]
        fn any_answer_is_read_without_panicking(text in "\\PC{0,300}") {
            let _ = parse_tool_calls(&text);
            let _ = parse_lenient(&text);
        }

        /// A call in a fenced block inside prose is found, with its arguments intact.
        #[test]
        fn a_fenced_call_is_found_in_any_prose(
            before in "[a-zA-Z .,!?]{0,80}",
            after in "[a-zA-Z .,!?]{0,80}",
            name in "[a-z][a-z_]{0,15}",
            n in proptest::num::i64::ANY,
            word in "[^`\\p{C}]{0,20}",
        ) {
            let call = json!({"name": name, "arguments": {"n": n, "word": word}});
            let text = format!("{before}\n```json\n{call}\n```\n{after}");
            let calls = parse_tool_calls(&text);
            proptest::prop_assert_eq!(calls.len(), 1, "{} → {:?}", text, calls);
            proptest::prop_assert_eq!(&calls[0].name, &name);
            proptest::prop_assert_eq!(&calls[0].arguments, &json!({"n": n, "word": word}));
        }
    }
}
