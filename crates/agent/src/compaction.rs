//! Compaction: the conversation's earlier part replaced by a summary the model writes, so a
//! long session fits its context again. The last exchange (from the last user message on)
//! stays as it was, so the model still sees the question it is answering.

use tether_llm::{ChatRequest, Provider};
use tether_protocol::chat::Message;

/// The conversation as Markdown, one section per message: what a summary is written from, and
/// the body of an exported session.
pub fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        match message {
            Message::System { content } => out.push_str(&format!("\n## System\n\n{content}\n")),
            Message::User { content } => out.push_str(&format!("\n## You\n\n{content}\n")),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                out.push_str("\n## Assistant\n\n");
                if !content.is_empty() {
                    out.push_str(content);
                    out.push('\n');
                }
                for call in tool_calls {
                    out.push_str(&format!("\n→ `{}` `{}`\n", call.name, call.arguments));
                }
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => {
                let mark = if *is_error { "✗" } else { "←" };
                out.push_str(&format!("\n{mark} `{name}`:\n\n```\n{content}\n```\n"));
            }
        }
    }
    out
}

/// `conversation` with all but its last exchange replaced by a summary `provider` writes,
/// and the line that tells a person so; `Err` says why not (nothing to compact, or the model
/// failed).
pub async fn compact(
    provider: &dyn Provider,
    conversation: &[Message],
) -> Result<(Vec<Message>, String), String> {
    let keep_from = conversation
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    if keep_from == 0 {
        return Err("nothing to compact yet: the conversation is one exchange long".into());
    }
    let request = ChatRequest {
        messages: vec![
            Message::system(
                "Summarise this conversation for your own later use: the user's goals, facts learned from tools, decisions made, open questions. Be concise.",
            ),
            Message::user(transcript(&conversation[..keep_from])),
        ],
        max_tokens: Some(1024),
        ..Default::default()
    };
    let summary = tether_llm::complete(provider, &request)
        .await
        .map_err(|e| format!("compacting failed: the model answered {e}"))?;
    let mut compacted = vec![Message::user(format!(
        "[Summary of the earlier conversation]\n{}",
        summary.text
    ))];
    compacted.extend_from_slice(&conversation[keep_from..]);
    let note = format!(
        "compacted {keep_from} earlier messages into a summary ({} tokens)",
        summary.usage.output_tokens
    );
    Ok((compacted, note))
}
