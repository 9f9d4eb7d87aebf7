//! The walk the argument-narrowing modules (`paths`, `numbers`, `described`, `named`, `zones`)
//! share: a copy of each offered tool with its properties handed over for editing, what counts
//! as a value still left open, and the words of a message or an identifier.

use serde_json::{Map, Value};
use tether_protocol::chat::ToolDefinition;

/// The words of `text`, lower-cased, without punctuation: what the narrowing modules match
/// names, places and property words against.
pub(crate) fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// `text`'s words (as [`words_of`] gives them) joined by single spaces and padded with one on
/// each side, so that `" {phrase} "` matches whole words only.
pub(crate) fn spaced_words(text: &str) -> String {
    format!(" {} ", words_of(text).join(" "))
}

/// The lower-cased words of `text` with identifiers split too: `tableName`, `table_name` and
/// `table-name` all give `table`, `name`.
pub(crate) fn identifier_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        let mut word = String::new();
        for c in chunk.chars() {
            if c.is_uppercase() && !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
        }
        if !word.is_empty() {
            words.push(word);
        }
    }
    words
}

/// Whether `schema` leaves its value open: one of `types`, with no `enum` or `const` yet.
pub(crate) fn is_free(schema: &Value, types: &[&str]) -> bool {
    schema
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| types.contains(&t))
        && schema.get("enum").is_none()
        && schema.get("const").is_none()
}

/// Copies of `tools`, each after `edit` was given its qualified name, its required parameters
/// and its properties; a tool without properties is copied unchanged.
pub(crate) fn edit_properties(
    tools: &[ToolDefinition],
    mut edit: impl FnMut(&str, &[String], &mut Map<String, Value>),
) -> Vec<ToolDefinition> {
    tools
        .iter()
        .map(|tool| {
            let mut tool = tool.clone();
            let required: Vec<String> = tool.parameters["required"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            if let Some(properties) = tool
                .parameters
                .get_mut("properties")
                .and_then(Value::as_object_mut)
            {
                edit(&tool.name, &required, properties);
            }
            tool
        })
        .collect()
}
