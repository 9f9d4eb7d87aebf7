//! GBNF grammars that make small models call tools correctly: the output must be
//! `{"tool": "<one of the tool names>", "arguments": {…}}` with each tool's required arguments
//! in schema order and typed as the schema says. The name comes first, so once it is chosen
//! the grammar only allows that tool's arguments.

use serde_json::Value;
use tether_protocol::chat::ToolDefinition;

/// The most items a typed array argument may hold.
const MAX_ITEMS: usize = 3;

/// The text a tool call starts with; also the trigger of the lazy grammar.
pub const CALL_OPENER: &str = "{\"tool\": ";

fn literal(text: &str) -> String {
    let escaped: String = text
        .chars()
        .map(|c| match c {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            '\n' => "\\n".to_string(),
            c => c.to_string(),
        })
        .collect();
    format!("\"{escaped}\"")
}

/// A JSON string literal (the quotes included) as a GBNF literal.
fn json_literal(text: &str) -> String {
    literal(&serde_json::to_string(text).unwrap_or_default())
}

/// The grammar rule for one schema value.
fn value_rule(schema: &Value) -> String {
    if let Some(value) = schema.get("const") {
        return literal(&value.to_string());
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        let alternatives: Vec<String> = options.iter().map(|o| literal(&o.to_string())).collect();
        if !alternatives.is_empty() {
            return format!("({})", alternatives.join(" | "));
        }
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => "string".into(),
        Some("integer") => "integer".into(),
        Some("number") => "number".into(),
        Some("boolean") => "boolean".into(),
        // Items typed as the schema says, one to three of them: a required list is not empty,
        // and a small model repeats items (`[1, 2, 3, …` until its token limit when free).
        Some("array") => match schema.get("items").filter(|items| items.is_object()) {
            Some(items) => {
                let item = value_rule(items);
                format!(
                    "\"[\" {item} ( \", \" {item} ){{0,{}}} \"]\"",
                    MAX_ITEMS - 1
                )
            }
            None => "array".into(),
        },
        // An object with required properties is spelled out like a tool's arguments (the
        // meta-tool's `params`); one without is any object, as optional fields are its point.
        Some("object") if has_required(schema) => arguments_rule(schema),
        Some("object") => "object".into(),
        _ => "value".into(),
    }
}

fn has_required(schema: &Value) -> bool {
    schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
}

/// The arguments object of one tool: required properties in schema order. A schema made of
/// alternatives (`oneOf`/`anyOf` without properties of its own) allows any one of them.
fn arguments_rule(schema: &Value) -> String {
    if schema.get("properties").is_none()
        && let Some(alternatives) = schema
            .get("oneOf")
            .or_else(|| schema.get("anyOf"))
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
    {
        let rules: Vec<String> = alternatives.iter().map(arguments_rule).collect();
        return format!("( {} )", rules.join(" | "));
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut parts = Vec::new();
    if let Some(properties) = properties {
        for (name, property) in properties {
            if required.contains(&name.as_str()) {
                parts.push(format!(
                    "{} \": \" {}",
                    json_literal(name),
                    value_rule(property)
                ));
            }
        }
    }
    if parts.is_empty() {
        return "\"{}\"".into();
    }
    format!("\"{{\" {} \"}}\"", parts.join(" \", \" "))
}

/// A grammar whose root is one tool call among `tools`.
pub fn tool_call_grammar(tools: &[ToolDefinition]) -> String {
    let mut rules = Vec::new();
    let mut alternatives = Vec::new();
    for (index, tool) in tools.iter().enumerate() {
        let rule = format!("call{index}");
        rules.push(format!(
            "{rule} ::= {} {} \", \\\"arguments\\\": \" {} \"}}\"",
            literal(CALL_OPENER),
            json_literal(&tool.name),
            arguments_rule(&tool.parameters)
        ));
        alternatives.push(rule);
    }
    let mut grammar = format!("root ::= {}\n", alternatives.join(" | "));
    for rule in rules {
        grammar.push_str(&rule);
        grammar.push('\n');
    }
    // Bounded repetitions ({0,200}) expand into hundreds of rules and slow sampling badly; the
    // token limit of a call bounds a rambling string instead.
    grammar.push_str(
        r#"string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
integer ::= "-"? [0-9]+
number ::= "-"? [0-9]+ ("." [0-9]+)?
boolean ::= "true" | "false"
ws ::= [ ]?
value ::= object | array | string | number | boolean | "null"
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}"
array ::= "[" ws ( value ( "," ws value )* )? "]"
"#,
    );
    grammar
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn name_first_then_typed_required_arguments() {
        let tools = vec![
            ToolDefinition {
                name: "builtin__add".into(),
                description: "Add".into(),
                parameters: json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            },
            ToolDefinition {
                name: "builtin__current_time".into(),
                description: "Now".into(),
                parameters: json!({"type": "object", "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}}}),
            },
        ];
        let grammar = tool_call_grammar(&tools);
        assert!(grammar.starts_with("root ::= call0 | call1\n"), "{grammar}");
        assert!(
            grammar.contains(r#"call0 ::= "{\"tool\": " "\"builtin__add\"" ", \"arguments\": " "{" "\"a\"" ": " number ", " "\"b\"" ": " number "}" "}""#),
            "{grammar}"
        );
        assert!(grammar.contains(r#"call1 ::= "{\"tool\": " "\"builtin__current_time\"" ", \"arguments\": " "{}" "}""#), "{grammar}");
    }

    #[test]
    fn arrays_hold_typed_items() {
        let tools = vec![ToolDefinition {
            name: "memory__create_entities".into(),
            description: "Create".into(),
            parameters: json!({"type": "object", "properties": {"entities": {"type": "array", "items": {
                "type": "object", "properties": {"name": {"type": "string"},
                    "observations": {"type": "array", "items": {"type": "string"}}},
                "required": ["name", "observations"]}}}, "required": ["entities"]}),
        }];
        let grammar = tool_call_grammar(&tools);
        let observations = r#""[" string ( ", " string ){0,2} "]""#;
        let entity = format!(
            r#""{{" "\"name\"" ": " string ", " "\"observations\"" ": " {observations} "}}""#
        );
        assert!(
            grammar.contains(&format!(r#""[" {entity} ( ", " {entity} ){{0,2}} "]""#)),
            "{grammar}"
        );
    }

    #[test]
    fn alternatives_fix_constants_and_spell_out_nested_arguments() {
        // The meta-tool narrowed for a small model: one shape per pre-selected tool.
        let tools = vec![ToolDefinition {
            name: "mcp_query".into(),
            description: "Call".into(),
            parameters: json!({"type": "object", "oneOf": [
                {"type": "object", "properties": {"server": {"const": "builtin"}, "tool": {"const": "add"},
                 "params": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}},
                 "required": ["server", "tool", "params"]},
                {"type": "object", "properties": {"server": {"const": "builtin"}, "tool": {"const": "now"},
                 "params": {"const": {}}},
                 "required": ["server", "tool", "params"]}
            ]}),
        }];
        let grammar = tool_call_grammar(&tools);
        assert!(
            grammar.contains(r#"( "{" "\"server\"" ": " "\"builtin\"" ", " "\"tool\"" ": " "\"add\"" ", " "\"params\"" ": " "{" "\"a\"" ": " number "}" "}" | "{" "\"server\"" ": " "\"builtin\"" ", " "\"tool\"" ": " "\"now\"" ", " "\"params\"" ": " "{}" "}" )"#),
            "{grammar}"
        );
    }
}
