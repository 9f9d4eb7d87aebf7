//! Tool and prompt arguments as a person types them: one JSON object, or `key=value` pairs
//! whose values are typed by the tool's input schema (so `a=2` is the number 2 for a number
//! parameter and the string "2" for a string parameter).

use serde_json::{Map, Value};

/// Parses tool-call arguments against the tool's input schema.
pub fn tool_arguments(
    words: &[String],
    input_schema: &Value,
) -> Result<Map<String, Value>, String> {
    if let [single] = words
        && single.trim_start().starts_with(['{', '['])
    {
        return match serde_json::from_str::<Value>(single) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err("arguments must be a JSON object, like '{\"a\": 2}'".into()),
            Err(e) => Err(format!(
                "arguments are not valid JSON ({e}); pass one JSON object like '{{\"a\": 2}}' or key=value pairs"
            )),
        };
    }
    let declared: Vec<&str> = input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    // A schema that says nothing about its parameters takes whatever is given.
    let open =
        declared.is_empty() || input_schema.get("additionalProperties") == Some(&Value::Bool(true));
    let mut map = Map::new();
    for word in words {
        let (key, raw) = split_pair(word)?;
        if map.contains_key(key) {
            return Err(format!(
                "argument \"{key}\" is given twice; give each parameter once"
            ));
        }
        if !open && !declared.contains(&key) {
            return Err(unknown_parameter(key, &declared));
        }
        let value = typed_value(key, raw, property_types(input_schema, key))?;
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

/// Parses prompt arguments, which MCP defines as strings, against the prompt's declared
/// arguments: each given once, each one the prompt takes, every required one present.
pub fn prompt_arguments(
    words: &[String],
    declared: &[tether_protocol::PromptArgument],
) -> Result<Map<String, Value>, String> {
    let names: Vec<&str> = declared.iter().map(|a| a.name.as_str()).collect();
    let mut map = Map::new();
    for word in words {
        let (key, raw) = split_pair(word)?;
        if map.contains_key(key) {
            return Err(format!("argument \"{key}\" is given twice; give it once"));
        }
        if !names.is_empty() && !names.contains(&key) {
            return Err(unknown_parameter(key, &names));
        }
        map.insert(key.to_string(), Value::String(raw.to_string()));
    }
    let missing: Vec<&str> = declared
        .iter()
        .filter(|a| a.required && !map.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing required argument{} {}; add {}",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|m| format!("\"{m}\""))
                .collect::<Vec<_>>()
                .join(", "),
            missing
                .iter()
                .map(|m| format!("{m}=…"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    Ok(map)
}

/// "no parameter "cty" (did you mean "city"?); it takes: city, units".
fn unknown_parameter(key: &str, declared: &[&str]) -> String {
    let near = tether_mcp::error::near_matches(key, declared.iter().copied());
    let hint = match near.first() {
        Some(best) => format!(" (did you mean \"{best}\"?)"),
        None => String::new(),
    };
    format!(
        "no parameter \"{key}\"{hint}; it takes: {}",
        if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        }
    )
}

fn split_pair(word: &str) -> Result<(&str, &str), String> {
    match word.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key, value)),
        _ => Err(format!(
            "argument \"{word}\" is not key=value; write name=value pairs or one JSON object"
        )),
    }
}

/// The JSON types the schema allows for `key`; empty when unknown.
fn property_types(schema: &Value, key: &str) -> Vec<String> {
    match schema.pointer(&format!(
        "/properties/{}",
        key.replace('~', "~0").replace('/', "~1")
    )) {
        Some(property) => match property.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        },
        None => Vec::new(),
    }
}

fn typed_value(key: &str, raw: &str, types: Vec<String>) -> Result<Value, String> {
    let allows = |t: &str| types.iter().any(|x| x == t);
    if types.is_empty() {
        // Unknown type: JSON if it parses, else the text itself.
        return Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string())));
    }
    if types.len() == 1 && allows("string") {
        return Ok(Value::String(raw.to_string()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(value) if types.iter().any(|t| matches_type(&value, t)) => Ok(value),
        _ if allows("string") => Ok(Value::String(raw.to_string())),
        _ => Err(format!(
            "argument {key}: \"{raw}\" is not {}{}",
            types.join(" or "),
            type_hint(key, raw, &types)
        )),
    }
}

/// How to write `raw` as the type the schema wants, when that is not obvious: arrays and objects
/// are JSON, quoted for the shell.
fn type_hint(key: &str, raw: &str, types: &[String]) -> String {
    let quoted = |item: &str| Value::String(item.trim().to_string()).to_string();
    if types.iter().any(|t| t == "array") {
        let items: Vec<String> = raw.split(',').map(quoted).collect();
        format!("; write a JSON array: {key}='[{}]'", items.join(", "))
    } else if types.iter().any(|t| t == "object") {
        format!("; write a JSON object: {key}='{{\"name\": \"value\"}}'")
    } else {
        String::new()
    }
}

fn matches_type(value: &Value, json_type: &str) -> bool {
    match json_type {
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        "string" => value.is_string(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plain_word_for_an_array_says_how_to_write_one() {
        let schema = json!({"type": "object", "properties": {
            "names": {"type": "array"}, "filter": {"type": "object"}}});
        let said = |raw: &str| {
            typed_value(
                raw.split('=').next().unwrap_or_default(),
                raw.split_once('=').map(|p| p.1).unwrap_or_default(),
                property_types(&schema, raw.split('=').next().unwrap_or_default()),
            )
            .unwrap_err()
        };
        assert_eq!(
            said("names=Carol"),
            r#"argument names: "Carol" is not array; write a JSON array: names='["Carol"]'"#
        );
        assert!(said("names=Carol,Dave").ends_with(r#"names='["Carol", "Dave"]'"#));
        assert!(said("filter=x").contains(r#"write a JSON object: filter='{"name": "value"}'"#));
    }

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn pairs_are_typed_by_schema() {
        let schema = json!({"properties": {
            "a": {"type": "number"}, "name": {"type": "string"}, "flag": {"type": "boolean"},
            "tags": {"type": "array"}
        }, "additionalProperties": true});
        let args = tool_arguments(
            &words(&["a=2", "name=42", "flag=true", "tags=[1,2]", "other=x"]),
            &schema,
        )
        .unwrap();
        assert_eq!(
            Value::Object(args),
            json!({"a": 2, "name": "42", "flag": true, "tags": [1, 2], "other": "x"})
        );
    }

    #[test]
    fn wrong_types_and_bad_json_are_explained() {
        let schema = json!({"properties": {"a": {"type": "number"}}});
        let err = tool_arguments(&words(&["a=two"]), &schema).unwrap_err();
        assert_eq!(err, "argument a: \"two\" is not number");
        let err = tool_arguments(&words(&["{\"a\": 2,}"]), &schema).unwrap_err();
        assert!(err.starts_with("arguments are not valid JSON"), "{err}");
        let err = tool_arguments(&words(&["a"]), &schema).unwrap_err();
        assert!(err.contains("not key=value"), "{err}");
    }

    #[test]
    fn unknown_and_repeated_parameters_are_refused_with_the_list() {
        let schema = json!({"properties": {"message": {"type": "string"}}});
        let err = tool_arguments(&words(&["message=hi", "c=3"]), &schema).unwrap_err();
        assert_eq!(err, "no parameter \"c\"; it takes: message");
        let err = tool_arguments(&words(&["mesage=hi"]), &schema).unwrap_err();
        assert!(err.contains("did you mean \"message\"?"), "{err}");
        let err = tool_arguments(&words(&["message=hi", "message=ho"]), &schema).unwrap_err();
        assert!(err.contains("\"message\" is given twice"), "{err}");
        // A schema without parameters takes anything.
        assert!(tool_arguments(&words(&["x=1"]), &json!({"type": "object"})).is_ok());
    }

    #[test]
    fn prompt_arguments_are_checked_against_the_prompt() {
        let declared: Vec<tether_protocol::PromptArgument> = serde_json::from_value(json!([
            {"name": "city", "required": true}, {"name": "units"}]))
        .unwrap();
        let err = prompt_arguments(&words(&["cty=Oslo"]), &declared).unwrap_err();
        assert!(
            err.contains("no parameter \"cty\" (did you mean \"city\"?)"),
            "{err}"
        );
        let err = prompt_arguments(&words(&["units=metric"]), &declared).unwrap_err();
        assert_eq!(err, "missing required argument \"city\"; add city=…");
        let args = prompt_arguments(&words(&["city=Oslo"]), &declared).unwrap();
        assert_eq!(Value::Object(args), json!({"city": "Oslo"}));
    }

    #[test]
    fn json_object_passes_through() {
        let args = tool_arguments(&words(&["{\"a\": 2, \"b\": 3}"]), &json!({})).unwrap();
        assert_eq!(Value::Object(args), json!({"a": 2, "b": 3}));
        assert!(tool_arguments(&words(&["[1]"]), &json!({})).is_err());
    }

    proptest::proptest! {
        /// Whatever a person types, arguments parse or say what is wrong; never a panic.
        #[test]
        fn any_words_parse_or_explain(words in proptest::collection::vec("\\PC{0,24}", 0..5)) {
            let schema = json!({"type": "object", "properties": {
                "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
                "d": {"type": "array"}, "e": {"type": "number"}}});
            if let Err(message) = tool_arguments(&words, &schema) {
                proptest::prop_assert!(!message.is_empty());
            }
            let _ = prompt_arguments(&words, &[]);
        }

        /// `key=value` is typed by the schema: the integer for an integer, the text as typed
        /// for a string.
        #[test]
        fn values_are_typed_by_the_schema(n in proptest::num::i64::ANY, text in "[^\\x00]{0,24}") {
            let schema = json!({"type": "object", "properties": {
                "a": {"type": "integer"}, "b": {"type": "string"}}});
            let parsed = tool_arguments(&[format!("a={n}"), format!("b={text}")], &schema).unwrap();
            proptest::prop_assert_eq!(&parsed["a"], &json!(n));
            proptest::prop_assert_eq!(&parsed["b"], &json!(text));
        }
    }
}
