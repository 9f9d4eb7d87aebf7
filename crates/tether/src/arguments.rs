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
    let mut map = Map::new();
    for word in words {
        let (key, raw) = split_pair(word)?;
        let value = typed_value(key, raw, property_types(input_schema, key))?;
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

/// Parses prompt arguments, which MCP defines as strings.
pub fn prompt_arguments(words: &[String]) -> Result<Map<String, Value>, String> {
    words
        .iter()
        .map(|w| split_pair(w).map(|(k, v)| (k.to_string(), Value::String(v.to_string()))))
        .collect()
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
            "argument {key}: \"{raw}\" is not {}",
            types.join(" or ")
        )),
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

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn pairs_are_typed_by_schema() {
        let schema = json!({"properties": {
            "a": {"type": "number"}, "name": {"type": "string"}, "flag": {"type": "boolean"},
            "tags": {"type": "array"}
        }});
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
            let _ = prompt_arguments(&words);
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
