//! Tool input schemas made acceptable to every provider without losing meaning: the root is
//! an object schema with `properties`, and root keywords providers reject (`$schema`, `$id`)
//! are dropped. Everything else (`$defs`, `anyOf`, formats, descriptions) is kept as is.

use serde_json::{Map, Value, json};

/// The schema as sent to a provider.
pub fn provider_schema(schema: &Value) -> Value {
    let mut root = match schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    root.remove("$schema");
    root.remove("$id");
    let is_object = match root.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(_) => false,
    };
    if !is_object {
        // A non-object root cannot be a tool's parameters; wrap it so nothing is lost.
        let inner = Value::Object(root);
        return json!({"type": "object", "properties": {"value": inner}, "required": ["value"]});
    }
    root.insert("type".into(), json!("object"));
    root.entry("properties").or_insert_with(|| json!({}));
    Value::Object(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_always_an_object_with_properties() {
        assert_eq!(
            provider_schema(&json!({})),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            provider_schema(
                &json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})
            ),
            json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})
        );
        let wrapped = provider_schema(&json!({"type": "string"}));
        assert_eq!(wrapped["properties"]["value"]["type"], "string");
    }
}
