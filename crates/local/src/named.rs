//! A thing the message names beside its kind, for a parameter named after that kind: "the
//! books table" gives `table_name` the value `books`, "the branch called release" gives
//! `branch` the value `release`. Left free, the 135M model wrote `books_table`, which names no
//! table, and the server answered with nothing.

use serde_json::json;
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{edit_properties, identifier_words, is_free};

/// Words before a kind's noun that are not a name: "the table", "which branch", "a new file".
const NOT_NAMES: &[&str] = &[
    "the", "a", "an", "this", "that", "these", "those", "my", "our", "your", "their", "his", "her",
    "its", "which", "what", "each", "every", "all", "any", "some", "new", "current", "same",
    "other", "one", "of", "in", "on", "to", "from", "for", "with", "and", "or", "is", "are",
    "does", "do", "named", "called",
];

/// Kinds whose values other modules narrow (paths, repositories) or that hold free text.
const LEFT_TO_OTHERS: &[&str] = &[
    "file",
    "path",
    "directory",
    "dir",
    "folder",
    "repo",
    "repository",
    "query",
    "text",
    "content",
    "message",
    "description",
    "title",
    "comment",
    "url",
    "uri",
    "timezone",
    "zone",
    "time",
    "date",
    "type",
    "format",
    "mode",
];

/// The kind a parameter is named after: `table_name` and `tableName` → `table`, `branch` →
/// `branch`; none for names of two kinds (`branch_type`) or for [`LEFT_TO_OTHERS`].
fn kind_of(parameter: &str) -> Option<String> {
    let mut words = identifier_words(parameter);
    if words.last().is_some_and(|w| w == "name") && words.len() > 1 {
        words.pop();
    }
    match &words[..] {
        [kind] if kind.len() >= 3 && kind != "name" && !LEFT_TO_OTHERS.contains(&kind.as_str()) => {
            Some(kind.clone())
        }
        _ => None,
    }
}

/// The names `text` gives a thing of `kind`: the word before it ("the books table") or after
/// "named"/"called" ("a branch called release"), as written.
fn names_given(text: &str, kind: &str) -> Vec<String> {
    let tokens: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut names: Vec<String> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if !token.eq_ignore_ascii_case(kind) {
            continue;
        }
        let after = tokens.get(i + 1).map(|w| w.to_lowercase());
        let name = if matches!(after.as_deref(), Some("named" | "called")) {
            tokens.get(i + 2)
        } else {
            i.checked_sub(1).and_then(|j| tokens.get(j))
        };
        if let Some(name) = name.filter(|n| !NOT_NAMES.contains(&n.to_lowercase().as_str()))
            && !names.iter().any(|n| n == name)
        {
            names.push((*name).to_string());
        }
    }
    names
}

/// `tools` with each free string parameter named after a kind of thing (`table_name`) limited
/// to the one name the message gives a thing of that kind, when it gives exactly one.
pub fn named_things_only(tools: &[ToolDefinition], text: &str) -> Vec<ToolDefinition> {
    edit_properties(tools, |_, _, properties| {
        for (parameter, schema) in properties.iter_mut() {
            if !is_free(schema, &["string"]) {
                continue;
            }
            let Some(kind) = kind_of(parameter) else {
                continue;
            };
            if let [name] = &names_given(text, &kind)[..] {
                schema["enum"] = json!([name]);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn narrowed_to(schema: &Value) -> Option<&str> {
        schema["enum"].as_array()?.first()?.as_str()
    }

    fn describe_table() -> ToolDefinition {
        ToolDefinition {
            name: "sqlite__describe_table".into(),
            description: "Get the schema information for a specific table".into(),
            parameters: json!({
                "type": "object",
                "properties": {"table_name": {"type": "string", "description": "Name of the table"}},
                "required": ["table_name"]
            }),
        }
    }

    #[test]
    fn a_kind_is_what_a_parameter_is_named_after() {
        assert_eq!(kind_of("table_name").as_deref(), Some("table"));
        assert_eq!(kind_of("tableName").as_deref(), Some("table"));
        assert_eq!(kind_of("branch").as_deref(), Some("branch"));
        assert_eq!(kind_of("branch_type"), None);
        assert_eq!(kind_of("name"), None);
        assert_eq!(kind_of("path"), None);
        assert_eq!(kind_of("file_name"), None);
    }

    #[test]
    fn the_name_beside_the_kind_is_the_value() {
        let narrowed = named_things_only(
            &[describe_table()],
            "What columns does the books table have?",
        );
        let schema = &narrowed[0].parameters["properties"]["table_name"];
        assert_eq!(narrowed_to(schema), Some("books"));
        let called = named_things_only(&[describe_table()], "Describe the table called Orders");
        assert_eq!(
            narrowed_to(&called[0].parameters["properties"]["table_name"]),
            Some("Orders")
        );
    }

    #[test]
    fn no_name_or_two_names_leave_the_value_free() {
        for text in [
            "Which table has the most rows?",
            "Describe the table",
            "Compare the books table with the authors table",
        ] {
            let narrowed = named_things_only(&[describe_table()], text);
            assert!(
                narrowed[0].parameters["properties"]["table_name"]
                    .get("enum")
                    .is_none(),
                "{text}"
            );
        }
    }
}
