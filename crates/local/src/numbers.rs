//! Numbers a small model may give. When a message writes out as many numbers as a tool's
//! required numeric parameters need, those parameters are narrowed to the numbers written:
//! left free, the 135M model copies `1234` as `123` or makes one up.

use serde_json::{Value, json};
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{edit_properties, is_free};

/// The numbers `text` writes out, in order: `12`, `-3`, `2.5`, `1,234` (as 1234); a digit
/// run inside a word (`mp3`, `v2`) is not one.
pub fn numbers_written_in(text: &str) -> Vec<f64> {
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '.'));
        if !starts {
            i += 1;
            continue;
        }
        let negative = i > 0
            && chars[i - 1] == '-'
            && (i == 1 || chars[i - 2].is_whitespace() || chars[i - 2] == '(');
        let mut digits = String::new();
        while i < chars.len() {
            let c = chars[i];
            let next_is_digit = chars.get(i + 1).is_some_and(char::is_ascii_digit);
            let decimal_point = c == '.' && next_is_digit && !digits.contains('.');
            if c.is_ascii_digit() || decimal_point {
                digits.push(c);
            } else if !(c == ',' && thousands_group(&chars[i + 1..])) {
                // Anything but a thousands separator (skipped) ends the number.
                break;
            }
            i += 1;
        }
        if let Ok(value) = digits.parse::<f64>() {
            found.push(if negative { -value } else { value });
        }
    }
    found
}

/// Whether `rest` (after a comma) begins with exactly three digits and then no digit.
fn thousands_group(rest: &[char]) -> bool {
    rest.len() >= 3
        && rest[..3].iter().all(char::is_ascii_digit)
        && !rest.get(3).is_some_and(char::is_ascii_digit)
}

/// `tools` with their free numeric parameters limited to the numbers `text` writes out,
/// for each tool whose required numeric parameters are no more than the numbers written.
pub fn written_numbers_only(tools: &[ToolDefinition], text: &str) -> Vec<ToolDefinition> {
    let numbers = numbers_written_in(text);
    if numbers.is_empty() {
        return tools.to_vec();
    }
    edit_properties(tools, |_, required, properties| {
        let free = |schema: &Value| is_free(schema, &["number", "integer"]);
        let needed = properties
            .iter()
            .filter(|(name, schema)| required.contains(name) && free(schema))
            .count();
        if needed == 0 || needed > numbers.len() {
            return;
        }
        for schema in properties.values_mut().filter(|s| free(s)) {
            let integer = schema.get("type").and_then(Value::as_str) == Some("integer");
            let mut allowed: Vec<Value> = Vec::new();
            for &n in &numbers {
                let value = if n.fract() == 0.0 && n.abs() < 1e15 {
                    // Written whole, given whole: `60`, not `60.0`.
                    json!(n as i64)
                } else if integer {
                    continue;
                } else {
                    json!(n)
                };
                if !allowed.contains(&value) {
                    allowed.push(value);
                }
            }
            if !allowed.is_empty() {
                schema["enum"] = Value::Array(allowed);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_as_written() {
        assert_eq!(
            numbers_written_in("What's the sum of 1234 and 4321?"),
            [1234.0, 4321.0]
        );
        assert_eq!(
            numbers_written_in("Pay 1,250.50 minus -3 for 2 mp3 files, v2."),
            [1250.5, -3.0, 2.0]
        );
        assert_eq!(numbers_written_in("at 10am, 3rd floor"), [10.0, 3.0]);
        assert!(numbers_written_in("no numbers here").is_empty());
    }

    #[test]
    fn numeric_parameters_take_the_numbers_written() {
        let tool = |required: Value| ToolDefinition {
            name: "calc__add".into(),
            description: "Add".into(),
            parameters: json!({"type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"},
                               "times": {"type": "integer"}, "label": {"type": "string"}},
                "required": required}),
        };
        let narrowed = written_numbers_only(&[tool(json!(["a", "b"]))], "add 1234 and 2.5");
        let properties = &narrowed[0].parameters["properties"];
        assert_eq!(properties["a"]["enum"], json!([1234, 2.5]));
        assert_eq!(properties["b"]["enum"], json!([1234, 2.5]));
        assert_eq!(properties["times"]["enum"], json!([1234]));
        assert!(properties["label"].get("enum").is_none());
        let grammar = crate::grammar::tool_call_grammar(&narrowed);
        assert!(grammar.contains(r#"("1234" | "2.5")"#), "{grammar}");
        // Fewer numbers than the tool needs: it may need one the message does not write.
        let free = written_numbers_only(&[tool(json!(["a", "b"]))], "double 21");
        assert_eq!(free[0], tool(json!(["a", "b"])));
        let none = written_numbers_only(&[tool(json!(["a"]))], "add them");
        assert_eq!(none[0], tool(json!(["a"])));
    }
}
