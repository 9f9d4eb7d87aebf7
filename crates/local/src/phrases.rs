//! Words a small model ran together. Asked to "remember that Bob likes green tea", the 135M
//! model stores `GreenTea`: the message's words joined as an identifier. A text value of a
//! call that is, split at its capitals, underscores and hyphens, words the message writes apart
//! (in the same order, whole words) is given back as the message writes them. Values of
//! parameters that name things a machine reads (a path, a branch, a table, an id, a query) are
//! left alone: there the joined form may be the point.

use serde_json::Value;

/// Parameter names whose values are identifiers for a machine, not words for a person.
const IDENTIFIERS: &[&str] = &[
    "path",
    "file",
    "dir",
    "directory",
    "branch",
    "revision",
    "ref",
    "url",
    "uri",
    "id",
    "key",
    "table",
    "column",
    "query",
    "sql",
    "statement",
    "command",
    "code",
    "pattern",
    "regex",
];

/// `arguments` (a JSON object) with each text the model joined from the words of `message`
/// written as the message writes them. `None` when nothing changed.
pub(crate) fn as_written(arguments: &str, message: &str) -> Option<String> {
    let mut value: Value = serde_json::from_str(arguments).ok()?;
    restore(&mut value, None, message).then(|| value.to_string())
}

/// Restores the joined texts inside `value`, the value of the parameter `name` (`None` at the
/// top and in lists); whether any changed.
fn restore(value: &mut Value, name: Option<&str>, message: &str) -> bool {
    match value {
        Value::String(text) => {
            if name.is_some_and(names_an_identifier) {
                return false;
            }
            match written_apart(text, message) {
                Some(words) => {
                    *text = words;
                    true
                }
                None => false,
            }
        }
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| {
            restore(item, name, message) | changed
        }),
        Value::Object(fields) => fields.iter_mut().fold(false, |changed, (key, field)| {
            restore(field, Some(key), message) | changed
        }),
        _ => false,
    }
}

/// Whether a parameter called `name` holds an identifier ([`IDENTIFIERS`]), by its words.
fn names_an_identifier(name: &str) -> bool {
    crate::narrowing::identifier_words(name)
        .iter()
        .any(|word| IDENTIFIERS.contains(&word.as_str()))
}

/// The stretch of `message` that `joined` (one word of letters, with no spaces) was made
/// from: two or more whole words, in order, separated by spaces only.
fn written_apart(joined: &str, message: &str) -> Option<String> {
    // Lower-casing keeps the byte offsets of the message's text only for ASCII.
    if !message.is_ascii()
        || joined
            .chars()
            .any(|c| !c.is_alphabetic() && c != '_' && c != '-')
    {
        return None;
    }
    let words = crate::narrowing::identifier_words(joined);
    if words.len() < 2 {
        return None;
    }
    let spaced = words.join(" ");
    let lower = message.to_lowercase();
    lower.match_indices(&spaced).find_map(|(at, _)| {
        let end = at + spaced.len();
        let whole = !lower[..at].ends_with(char::is_alphanumeric)
            && !lower[end..].starts_with(char::is_alphanumeric);
        whole.then(|| message[at..end].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn joined_words_are_given_back_as_written() {
        let message = "Remember that Bob likes green tea.";
        let arguments = json!({"entities": [{"name": "Bob", "entityType": "GreenTea", "observations": ["GreenTea", "likes_green_tea"]}]});
        let revised: Value =
            serde_json::from_str(&as_written(&arguments.to_string(), message).unwrap()).unwrap();
        assert_eq!(
            revised,
            json!({"entities": [{"name": "Bob", "entityType": "green tea", "observations": ["green tea", "likes green tea"]}]})
        );
    }

    #[test]
    fn identifiers_and_words_the_message_does_not_write_apart_stay() {
        let message = "Create a branch called feature login, and note that the green tea ran out.";
        for arguments in [
            json!({"branch_name": "featureLogin"}),
            json!({"path": "GreenTea"}),
            json!({"note": "BlackTea"}),
            json!({"note": "Tea"}),
            json!({"note": "green-tea2"}),
        ] {
            assert_eq!(
                as_written(&arguments.to_string(), message),
                None,
                "{arguments}"
            );
        }
        // Part of a longer word is not the word.
        assert_eq!(
            as_written(&json!({"note": "GreenTea"}).to_string(), "evergreen tea"),
            None
        );
    }
}
