//! Chat templates: the model's own Jinja template from its GGUF metadata, rendered with
//! minijinja (Python string methods via minijinja-contrib), with tools passed in when the
//! template knows about them and described in the system message when it does not. ChatML is
//! the fallback for models without a template.

use minijinja::{Environment, Error, ErrorKind, context};
use serde_json::{Value, json};
use tether_protocol::chat::{Message, ToolDefinition};

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// A model's chat template.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos: String,
    eos: String,
}

impl ChatTemplate {
    /// From GGUF metadata; `None` falls back to ChatML.
    pub fn new(source: Option<String>, bos: String, eos: String) -> ChatTemplate {
        ChatTemplate {
            source: source
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| CHATML.to_string()),
            bos,
            eos,
        }
    }

    /// Whether the template renders a `tools` list itself.
    pub fn supports_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// Whether the template knows tool calls and the `tool` role.
    fn knows_tool_role(&self) -> bool {
        self.source.contains("tool_calls")
            || self.source.contains("'tool'")
            || self.source.contains("\"tool\"")
    }

    /// Renders the prompt for `messages`, ending with the assistant's turn opener; turns before
    /// the last user message only when `earlier_turns`.
    pub fn render(
        &self,
        messages: &[Message],
        tools: &[ToolDefinition],
        tool_guide: Option<&str>,
        earlier_turns: bool,
    ) -> Result<String, String> {
        self.render_split(messages, tools, tool_guide, earlier_turns)
            .map(|rendered| rendered.text)
    }

    /// [`render`](Self::render), also saying where the system turn ends: the part of the
    /// prompt that the next question with the same tools and servers starts with too.
    pub fn render_split(
        &self,
        messages: &[Message],
        tools: &[ToolDefinition],
        tool_guide: Option<&str>,
        earlier_turns: bool,
    ) -> Result<RenderedPrompt, String> {
        let native_tools = self.supports_tools() && !tools.is_empty();
        let tool_role = self.knows_tool_role();
        // Small models without a tool role imitate the JSON calls in the history instead of
        // answering, so when no call is wanted the calls are left out and each result is
        // phrased as something the user reports.
        let answering = tools.is_empty() && !tool_role;
        // A result is reported under the tool that ran: for a meta-tool call, the tool named
        // in its arguments, or the model's answer names `mcp_query`.
        let ran: std::collections::HashMap<&str, String> = messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant { tool_calls, .. } => Some(tool_calls),
                _ => None,
            })
            .flatten()
            .filter(|c| c.name == "mcp_query")
            .filter_map(|c| {
                let arguments: Value = serde_json::from_str(&c.arguments).ok()?;
                let inner = arguments.get("tool")?.as_str()?;
                Some((c.id.as_str(), inner.to_string()))
            })
            .collect();
        // A small model is shown this turn alone: shown an earlier turn (its call, its answer
        // naming the tool, or a note of it) a 135M model calls that tool again or another at
        // random ("and what time is it?" after "12 + 30, use add" ran `add 12 30`; with a note
        // of the turn, `list_files`), and garbles its answer; asked alone it picks the clock
        // and reads the time right.
        let this_turn = messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .unwrap_or(0);
        let mut rendered: Vec<Value> = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            if !earlier_turns && index < this_turn && !matches!(message, Message::System { .. }) {
                continue;
            }
            rendered.push(match message {
                Message::System { content } => json!({"role": "system", "content": content}),
                Message::User { content } => json!({"role": "user", "content": content}),
                Message::Assistant { content, tool_calls } => {
                    let calls_text: Vec<String> = tool_calls
                        .iter()
                        .map(|c| {
                            let arguments: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
                            json!({"tool": c.name, "arguments": arguments}).to_string()
                        })
                        .collect();
                    if answering && !tool_calls.is_empty() && content.trim_start().starts_with(['{', '[']) || answering && content.is_empty() {
                        continue;
                    }
                    let text = if content.is_empty() { calls_text.join("\n") } else { content.clone() };
                    let mut m = json!({"role": "assistant", "content": text});
                    if tool_role && !tool_calls.is_empty() {
                        m["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                let arguments: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
                                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                            })
                            .collect();
                    }
                    m
                }
                Message::Tool { name, content, tool_call_id, .. } => {
                    if tool_role {
                        json!({"role": "tool", "name": name, "tool_call_id": tool_call_id, "content": content})
                    } else if answering {
                        let short = ran
                            .get(tool_call_id.as_str())
                            .map_or_else(|| name.split("__").last().unwrap_or(name), String::as_str);
                        json!({"role": "user", "content": format!("The {short} tool returned: {content}\nUse this to answer my question in a short sentence.")})
                    } else {
                        json!({"role": "user", "content": format!("Result of {name}: {content}")})
                    }
                }
            });
        }
        if let Some(guide) = tool_guide.filter(|_| !native_tools && !tools.is_empty()) {
            match rendered.first_mut() {
                Some(first) if first["role"] == "system" => {
                    let text = format!(
                        "{}\n\n{guide}",
                        first["content"].as_str().unwrap_or_default()
                    );
                    first["content"] = json!(text);
                }
                _ => rendered.insert(0, json!({"role": "system", "content": guide})),
            }
        }
        let tool_values: Vec<Value> = tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_function("strftime_now", |format: String| {
            chrono::Local::now().format(&format).to_string()
        });
        env.add_template("chat", &self.source)
            .map_err(|e| format!("the model's chat template does not parse: {e}"))?;
        let template = env.get_template("chat").map_err(|e| e.to_string())?;
        let render = |messages: &[Value], add_generation_prompt: bool| {
            let ctx = if native_tools {
                context! { messages => messages, tools => tool_values, add_generation_prompt => add_generation_prompt, bos_token => self.bos, eos_token => self.eos }
            } else {
                context! { messages => messages, add_generation_prompt => add_generation_prompt, bos_token => self.bos, eos_token => self.eos }
            };
            template
                .render(ctx)
                .map_err(|e| format!("the model's chat template failed: {e}"))
        };
        let text = render(&rendered, true)?;
        // The system turn rendered alone is where the prompt's shared part ends, when the
        // template renders it as the prompt's opening (not every template does: some fold the
        // system text into the first user turn).
        let system_turns = rendered
            .iter()
            .take_while(|m| m["role"] == "system")
            .count();
        let system_end = match system_turns {
            0 => 0,
            n => render(&rendered[..n], false)
                .ok()
                .filter(|opening| text.starts_with(opening.as_str()))
                .map_or(0, |opening| opening.len()),
        };
        Ok(RenderedPrompt { text, system_end })
    }
}

/// A rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedPrompt {
    /// The whole prompt.
    pub text: String,
    /// The byte length of its system turn (0: none, or the template does not open with it).
    pub system_end: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::chat::ToolCall;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_template_with_tools_in_the_system_prompt() {
        let template = ChatTemplate::new(Some(SMOLLM2.into()), String::new(), String::new());
        let tools = vec![ToolDefinition {
            name: "b__add".into(),
            description: "Add".into(),
            parameters: json!({}),
        }];
        let messages = vec![
            Message::system("Be brief."),
            Message::user("10+20?"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "b__add".into(),
                    arguments: "{\"a\":10,\"b\":20}".into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c".into(),
                name: "b__add".into(),
                content: "30".into(),
                images: vec![],
                is_error: false,
            },
        ];
        let prompt = template
            .render(&messages, &tools, Some("TOOLS: b__add"), true)
            .unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nBe brief.\n\nTOOLS: b__add<|im_end|>\n<|im_start|>user\n10+20?<|im_end|>\n<|im_start|>assistant\n{\"tool\":\"b__add\",\"arguments\":{\"a\":10,\"b\":20}}<|im_end|>\n<|im_start|>user\nResult of b__add: 30<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn the_system_turn_is_the_shared_opening_where_the_template_starts_with_it() {
        let template = ChatTemplate::new(Some(SMOLLM2.into()), String::new(), String::new());
        let messages = [Message::system("Be brief."), Message::user("10+20?")];
        let rendered = template.render_split(&messages, &[], None, true).unwrap();
        assert_eq!(
            &rendered.text[..rendered.system_end],
            "<|im_start|>system\nBe brief.<|im_end|>\n"
        );
        // No system message: SmolLM2's template adds its own, but nothing of ours is shared.
        let alone = template
            .render_split(&messages[1..], &[], None, true)
            .unwrap();
        assert_eq!(alone.system_end, 0);
        // A template that folds the system text into the user's turn shares nothing.
        let folded = ChatTemplate::new(
            Some("{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ messages[0]['content'] }} {{ m['content'] }} [/INST]{% endif %}{% endfor %}".into()),
            String::new(),
            String::new(),
        );
        let rendered = folded.render_split(&messages, &[], None, true).unwrap();
        assert_eq!(rendered.system_end, 0, "{}", rendered.text);
    }

    #[test]
    fn answering_after_tools_hides_the_json_calls() {
        let template = ChatTemplate::new(Some(SMOLLM2.into()), String::new(), String::new());
        let messages = vec![
            Message::user("10+20?"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "b__add".into(),
                    arguments: "{}".into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c".into(),
                name: "b__add".into(),
                content: "30".into(),
                images: vec![],
                is_error: false,
            },
        ];
        let prompt = template.render(&messages, &[], None, true).unwrap();
        assert!(!prompt.contains("\"tool\""), "{prompt}");
        assert!(prompt.contains("The add tool returned: 30"), "{prompt}");
    }

    /// A small model's follow-up question sees this turn alone: shown the earlier turn it
    /// repeats its call.
    #[test]
    fn a_follow_up_sees_earlier_turns_without_their_calls() {
        let template = ChatTemplate::new(Some(SMOLLM2.into()), String::new(), String::new());
        let tools = vec![ToolDefinition {
            name: "b__now".into(),
            description: "The time".into(),
            parameters: json!({}),
        }];
        let messages = vec![
            Message::user("12 + 30, use add"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "b__add".into(),
                    arguments: "{\"a\":12,\"b\":30}".into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c".into(),
                name: "b__add".into(),
                content: "42".into(),
                images: vec![],
                is_error: false,
            },
            Message::Assistant {
                content: "The add tool returned 42.".into(),
                tool_calls: vec![],
            },
            Message::user("And what time is it?"),
        ];
        let prompt = template
            .render(&messages, &tools, Some("TOOLS: b__now"), false)
            .unwrap();
        assert!(
            !prompt.contains("b__add") && !prompt.contains("\"a\":12"),
            "{prompt}"
        );
        assert!(!prompt.contains("12 + 30"), "{prompt}");
        assert!(
            prompt.ends_with(
                "<|im_start|>user\nAnd what time is it?<|im_end|>\n<|im_start|>assistant\n"
            ),
            "{prompt}"
        );
        // Its answer, too, is about this turn; a larger model sees the whole conversation.
        let answer = template.render(&messages, &[], None, false).unwrap();
        assert!(!answer.contains("12 + 30"), "{answer}");
        let larger = template
            .render(&messages, &tools, Some("TOOLS: b__now"), true)
            .unwrap();
        assert!(larger.contains("12 + 30, use add"), "{larger}");
    }

    #[test]
    fn templates_with_tools_get_them_natively() {
        let source = "{% if tools %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif %}{% for m in messages %}{{ m.role }}:{{ m.content.strip() }};{% endfor %}";
        let template = ChatTemplate::new(Some(source.into()), String::new(), String::new());
        let tools = vec![ToolDefinition {
            name: "b__add".into(),
            description: "Add".into(),
            parameters: json!({}),
        }];
        let prompt = template
            .render(&[Message::user(" hi ")], &tools, Some("unused"), true)
            .unwrap();
        assert_eq!(prompt, "[b__add]user:hi;");
    }
}
