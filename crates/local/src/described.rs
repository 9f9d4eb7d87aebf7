//! Values a parameter's description spells out, for a small model to choose from instead of
//! inventing one: the options it quotes ("local branches ('local'), remote branches
//! ('remote') or all branches ('all')") and the times of day a message gives, for a parameter
//! that asks for `HH:MM`. Left free, the 135M model fills such a string with its own name
//! (`"git_branch_type_string"`) or copies `9am` where `09:00` is required.

use serde_json::{Value, json};
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{edit_properties, is_free};

/// Parameters that hold free text by nature: quoted words in their descriptions are syntax
/// ("use 'AND' or 'OR'"), not the only values.
const FREE_TEXT: &[&str] = &[
    "query",
    "text",
    "content",
    "message",
    "prompt",
    "pattern",
    "search",
    "sql",
    "code",
    "body",
    "input",
    "command",
    "expression",
    "title",
    "description",
    "name",
    "comment",
];

/// Whether the parameter `name` holds free text (see [`FREE_TEXT`]).
fn holds_free_text(name: &str) -> bool {
    let lower = name.to_lowercase();
    name.len() <= 1 || FREE_TEXT.iter().any(|w| lower.contains(w))
}

/// Words that make quoted values examples rather than the options.
const EXAMPLE_MARKERS: &[&str] = &["e.g", "example", "such as", "like '", "like \""];

/// The options `description` quotes, when it quotes two or more single words and gives no
/// examples: `'local'`, `"all"`.
fn quoted_options(description: &str) -> Vec<String> {
    let lower = description.to_lowercase();
    if EXAMPLE_MARKERS.iter().any(|m| lower.contains(m)) {
        return Vec::new();
    }
    let mut options: Vec<String> = Vec::new();
    for quote in ['\'', '"'] {
        let pieces: Vec<&str> = description.split(quote).collect();
        // Odd pieces are inside quotes when the quotes pair up.
        if pieces.len().is_multiple_of(2) {
            continue;
        }
        for inside in pieces.iter().skip(1).step_by(2) {
            let word = !inside.is_empty()
                && inside.len() <= 24
                && inside
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if word && !options.iter().any(|o| o == inside) {
                options.push((*inside).to_string());
            }
        }
    }
    if options.len() >= 2 {
        options
    } else {
        Vec::new()
    }
}

/// The times of day `text` gives, as `HH:MM`: `9am` → `09:00`, `3:30 pm` → `15:30`, `14:05`.
pub fn times_written_in(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let chars: Vec<char> = lower.chars().collect();
    let mut times: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() || (i > 0 && chars[i - 1].is_alphanumeric()) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        let hour: u32 = chars[start..i]
            .iter()
            .collect::<String>()
            .parse()
            .unwrap_or(99);
        let mut minute = None;
        if chars.get(i) == Some(&':')
            && chars.get(i + 1).is_some_and(char::is_ascii_digit)
            && chars.get(i + 2).is_some_and(char::is_ascii_digit)
        {
            minute = chars[i + 1..i + 3]
                .iter()
                .collect::<String>()
                .parse::<u32>()
                .ok();
            i += 3;
        }
        let mut j = i;
        while chars.get(j) == Some(&' ') {
            j += 1;
        }
        let rest: String = chars[j..chars.len().min(j + 4)].iter().collect();
        let meridiem = if rest.starts_with("am") || rest.starts_with("a.m") {
            Some(false)
        } else if rest.starts_with("pm") || rest.starts_with("p.m") {
            Some(true)
        } else {
            None
        };
        let hour = match meridiem {
            Some(_) if !(1..=12).contains(&hour) => continue,
            Some(pm) => hour % 12 + if pm { 12 } else { 0 },
            // Without am/pm only `14:05` is a time; a bare `14` is a number.
            None if minute.is_none() => continue,
            None => hour,
        };
        let minute = minute.unwrap_or(0);
        if hour < 24 && minute < 60 {
            let time = format!("{hour:02}:{minute:02}");
            if !times.contains(&time) {
                times.push(time);
            }
        }
    }
    times
}

/// `tools` with each free string parameter limited to the options its description quotes, and
/// each that asks for `HH:MM` to the times of day `text` gives (when it gives any).
pub fn described_values_only(tools: &[ToolDefinition], text: &str) -> Vec<ToolDefinition> {
    let times = times_written_in(text);
    edit_properties(tools, |_, _, properties| {
        for (name, schema) in properties.iter_mut() {
            let Some(description) = schema
                .get("description")
                .and_then(Value::as_str)
                .filter(|_| is_free(schema, &["string"]))
            else {
                continue;
            };
            let allowed = if description.contains("HH:MM") {
                times.clone()
            } else if holds_free_text(name) {
                continue;
            } else {
                quoted_options(description)
            };
            if !allowed.is_empty() {
                schema["enum"] = json!(allowed);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_options_are_read_and_examples_are_not() {
        assert_eq!(
            quoted_options(
                "Whether to list local branches ('local'), remote branches ('remote') or all branches('all')."
            ),
            ["local", "remote", "all"]
        );
        assert!(quoted_options("IANA timezone name (e.g., 'America/New_York', 'UTC')").is_empty());
        assert!(quoted_options("A path such as 'docs' or 'src'").is_empty());
        assert!(quoted_options("The commit message, quoted 'like this'").is_empty());
        assert!(quoted_options("It's the user's name").is_empty());
    }

    #[test]
    fn times_of_day_are_read_as_hh_mm() {
        assert_eq!(
            times_written_in("Convert 9am New York time, or 3:30 pm, or 14:05, to London."),
            ["09:00", "15:30", "14:05"]
        );
        assert_eq!(times_written_in("12am and 12 p.m."), ["00:00", "12:00"]);
        assert!(times_written_in("Add 14 and 9.").is_empty());
        assert!(times_written_in("13pm is no time").is_empty());
    }

    #[test]
    fn described_values_narrow_free_strings() {
        let tools = vec![ToolDefinition {
            name: "time__convert_time".into(),
            description: "Convert time".into(),
            parameters: json!({"type": "object", "properties": {
                "time": {"type": "string", "description": "Time to convert in 24-hour format (HH:MM)"},
                "kind": {"type": "string", "description": "Either 'fast' or 'slow'."},
                "note": {"type": "string", "description": "Anything."},
                "query": {"type": "string", "description": "Join terms with 'AND' or 'OR'."}}}),
        }];
        let narrowed = described_values_only(&tools, "convert 9am please");
        let properties = &narrowed[0].parameters["properties"];
        assert_eq!(properties["time"]["enum"], json!(["09:00"]));
        assert_eq!(properties["kind"]["enum"], json!(["fast", "slow"]));
        assert!(properties["note"].get("enum").is_none());
        assert!(properties["query"].get("enum").is_none());
        let untimed = described_values_only(&tools, "convert the time");
        assert!(
            untimed[0].parameters["properties"]["time"]
                .get("enum")
                .is_none()
        );
    }
}
