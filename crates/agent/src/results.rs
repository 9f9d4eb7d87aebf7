//! Converting an MCP tool result into what a model reads: every content block faithfully
//! (text, structured content, images where the provider takes them, resource links, embedded
//! resources), truncated with a note when it is too long.

use tether_protocol::chat::ImageData;
use tether_protocol::{ContentBlock, ToolResult};

/// Default cap on a result's text, in characters.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 20_000;

/// The largest image passed to a model (Anthropic's own limit per image; OpenAI's is higher):
/// a bigger one would fail the whole request, or fill the context with one picture.
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// The text (and images) of a tool result for the model, cut to `max_chars` with a note.
pub fn result_for_model(
    result: &ToolResult,
    max_chars: usize,
    images_accepted: bool,
) -> (String, Vec<ImageData>) {
    let (text, images) = result_text(result, images_accepted);
    (truncate(text, max_chars), images)
}

/// The whole text (and images) of a tool result for the model, uncut.
pub fn result_text(result: &ToolResult, images_accepted: bool) -> (String, Vec<ImageData>) {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let base64_bytes = |data: &str| data.trim().len() / 4 * 3;
    for block in &result.content {
        match block {
            ContentBlock::Text { text } => parts.push(text.clone()),
            ContentBlock::Image { data, mime_type } => {
                if base64_bytes(data) > MAX_IMAGE_BYTES {
                    parts.push(format!(
                        "[image {mime_type}, about {} bytes: over the {} MB a model is sent, so left out]",
                        base64_bytes(data),
                        MAX_IMAGE_BYTES / (1024 * 1024)
                    ));
                } else if images_accepted {
                    images.push(ImageData {
                        data: data.clone(),
                        mime_type: mime_type.clone(),
                    });
                    parts.push(format!("[image {mime_type} attached]"));
                } else {
                    parts.push(format!(
                        "[image {mime_type}, about {} bytes; this model cannot see images]",
                        base64_bytes(data)
                    ));
                }
            }
            ContentBlock::Audio { data, mime_type } => parts.push(format!(
                "[audio {mime_type}, about {} bytes; not passed to the model]",
                base64_bytes(data)
            )),
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource link] {}", link.uri);
                if !link.name.is_empty() {
                    line.push_str(&format!(" ({})", link.name));
                }
                if let Some(mime) = &link.mime_type {
                    line.push_str(&format!(" {mime}"));
                }
                if let Some(description) = &link.description {
                    line.push_str(&format!(": {description}"));
                }
                parts.push(line);
            }
            ContentBlock::Resource { resource } => {
                let mime = resource.mime_type.as_deref().unwrap_or("unknown type");
                if let Some(text) = &resource.text {
                    parts.push(format!("[resource {} ({mime})]\n{text}", resource.uri));
                } else {
                    let size = resource.blob.as_deref().map(base64_bytes).unwrap_or(0);
                    parts.push(format!(
                        "[resource {}: binary {mime}, about {size} bytes]",
                        resource.uri
                    ));
                }
            }
        }
    }
    if let Some(structured) = &result.structured_content {
        // Servers should mirror structured output as text; add it only when some value of it
        // is missing from the text, so nothing is lost and nothing is said twice.
        let texts: Vec<&str> = result
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let mut leaves = Vec::new();
        collect_leaves(structured, &mut leaves);
        let mirrored = !texts.is_empty()
            && leaves
                .iter()
                .all(|leaf| texts.iter().any(|t| t.contains(leaf.as_str())));
        if !mirrored {
            parts.push(format!("structuredContent: {structured}"));
        }
    }
    let mut text = parts.join("\n");
    if text.is_empty() {
        text = "(the tool returned no content)".into();
    }
    if result.is_error {
        text = format!("Error: {text}");
    }
    (text, images)
}

/// The scalar values of a JSON value, as they would appear in text.
fn collect_leaves(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => map.values().for_each(|v| collect_leaves(v, out)),
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_leaves(v, out)),
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Null => {}
        other => out.push(other.to_string()),
    }
}

/// Cuts `text` to `max_chars` characters with a note saying how much was left out.
pub fn truncate(text: String, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text;
    }
    let cut: String = text.chars().take(max_chars).collect();
    format!(
        "{cut}\n[truncated: the result was {total} characters; only the first {max_chars} are shown]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(value: serde_json::Value) -> ToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn every_block_kind_is_described() {
        let r = result(json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "demo://r", "mimeType": "text/markdown", "text": "# Title"}}
        ], "structuredContent": {"n": 1}}));
        let (text, images) = result_for_model(&r, 1000, false);
        assert!(images.is_empty());
        assert_eq!(
            text,
            "hello\n[image image/png, about 3 bytes; this model cannot see images]\n[resource link] file:///a.txt (a.txt) text/plain\n[resource demo://r (text/markdown)]\n# Title\nstructuredContent: {\"n\":1}"
        );
        let (_, images) = result_for_model(&r, 1000, true);
        assert_eq!(images.len(), 1);
    }

    #[test]
    fn an_image_over_the_limit_is_left_out_with_a_note() {
        let big = "A".repeat((MAX_IMAGE_BYTES / 3 + 1) * 4);
        let r =
            result(json!({"content": [{"type": "image", "data": big, "mimeType": "image/png"}]}));
        let (text, images) = result_for_model(&r, 1000, true);
        assert!(images.is_empty());
        assert!(
            text.contains("over the 5 MB a model is sent, so left out"),
            "{text}"
        );
    }

    #[test]
    fn structured_values_missing_from_the_text_are_added() {
        let r = result(
            json!({"content": [{"type": "text", "text": "remember the milk"}], "structuredContent": {"content": "remember the milk"}}),
        );
        assert_eq!(result_for_model(&r, 1000, false).0, "remember the milk");
        let r = result(
            json!({"content": [{"type": "text", "text": "done"}], "structuredContent": {"count": 3}}),
        );
        assert_eq!(
            result_for_model(&r, 1000, false).0,
            "done\nstructuredContent: {\"count\":3}"
        );
    }

    #[test]
    fn mirrored_structured_content_is_not_repeated_and_errors_are_marked() {
        let r = result(
            json!({"content": [{"type": "text", "text": "{\"n\": 1}"}], "structuredContent": {"n": 1}, "isError": true}),
        );
        assert_eq!(result_for_model(&r, 1000, false).0, "Error: {\"n\": 1}");
    }

    #[test]
    fn long_results_are_truncated_with_a_note() {
        let r = result(json!({"content": [{"type": "text", "text": "x".repeat(50)}]}));
        let (text, _) = result_for_model(&r, 10, false);
        assert_eq!(
            text,
            format!(
                "{}\n[truncated: the result was 50 characters; only the first 10 are shown]",
                "x".repeat(10)
            )
        );
    }
}
