//! Keeping a conversation inside the model's context window. Tokens are estimated (four
//! characters a token, the usual rule for English and code) because providers count
//! differently and only report after the fact. Near the limit the oldest tool results are
//! shortened first: they are the bulk of most long conversations and the model can ask for
//! them again; what the user and the model said is kept.

use tether_protocol::chat::{Message, ToolDefinition};

/// Estimated tokens of a piece of text.
pub fn estimate_text(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// Estimated tokens of messages plus tool definitions.
pub fn estimate(messages: &[Message], tools: &[ToolDefinition]) -> usize {
    let per_message = 4;
    let messages: usize = messages
        .iter()
        .map(|m| {
            per_message
                + match m {
                    Message::System { content } | Message::User { content } => {
                        estimate_text(content)
                    }
                    Message::Assistant {
                        content,
                        tool_calls,
                    } => {
                        estimate_text(content)
                            + tool_calls
                                .iter()
                                .map(|c| estimate_text(&c.name) + estimate_text(&c.arguments))
                                .sum::<usize>()
                    }
                    Message::Tool { content, .. } => estimate_text(content),
                }
        })
        .sum();
    let tools: usize = tools
        .iter()
        .map(|t| {
            estimate_text(&t.name)
                + estimate_text(&t.description)
                + estimate_text(&t.parameters.to_string())
        })
        .sum();
    messages + tools
}

/// Shortens the oldest tool results (never those after the last user message) until the
/// estimate is at most `budget`. Returns how many were shortened.
pub fn trim_tool_results(messages: &mut [Message], budget: usize, fixed: usize) -> usize {
    let current_turn = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    let mut trimmed = 0;
    for index in 0..current_turn {
        if estimate(messages, &[]) + fixed <= budget {
            break;
        }
        if let Message::Tool { content, .. } = &mut messages[index]
            && content.chars().count() > 200
        {
            let kept: String = content.chars().take(160).collect();
            *content = format!(
                "{kept}… [shortened to fit the context window; {} characters left out, call the tool again if you need them]",
                content.chars().count() - 160
            );
            trimmed += 1;
        }
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(content: &str) -> Message {
        Message::Tool {
            tool_call_id: "c".into(),
            name: "s__t".into(),
            content: content.into(),
            images: Vec::new(),
            is_error: false,
        }
    }

    #[test]
    fn oldest_tool_results_are_shortened_first_and_the_current_turn_is_kept() {
        let big = "x".repeat(4000);
        let mut messages = vec![
            Message::user("first"),
            tool(&big),
            Message::user("second"),
            tool(&big),
            Message::user("third"),
            tool(&big),
        ];
        let before = estimate(&messages, &[]);
        assert!(before > 3000);
        let trimmed = trim_tool_results(&mut messages, 1500, 0);
        assert_eq!(trimmed, 2);
        assert!(estimate(&messages, &[]) <= 1500);
        let Message::Tool { content, .. } = &messages[5] else {
            panic!()
        };
        assert_eq!(
            content.len(),
            4000,
            "the current turn's result is untouched"
        );
        let Message::Tool { content, .. } = &messages[1] else {
            panic!()
        };
        assert!(content.contains("shortened to fit the context window"));
    }
}
