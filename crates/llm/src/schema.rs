//! Tool input schemas made acceptable to every provider without losing meaning: the root is
//! an object schema with `properties`; root keywords providers reject (`$schema`, `$id`) are
//! dropped; local references (`#/$defs/…`, `#/definitions/…`) are inlined, since several
//! providers and the embedded model's grammar cannot follow them; and a root `anyOf`/`oneOf`/
//! `allOf` of object schemas (which OpenAI refuses at the top level) becomes one object whose
//! properties are all of theirs. Everything else (formats, descriptions, nested combinators) is
//! kept as is.

use serde_json::{Map, Value, json};

/// How deep references are inlined; deeper ones, and a reference to a type it is already inside
/// (a recursive type), become an open schema (`{}`): the tool still sends, less precisely.
const MAX_REF_DEPTH: usize = 8;

/// The schema as sent to a provider.
pub fn provider_schema(schema: &Value) -> Value {
    let mut root = match schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    root.remove("$schema");
    root.remove("$id");
    let definitions = Value::Object(root.clone());
    if let Value::Object(inlined) = inline_refs(&Value::Object(root), &definitions, &mut Vec::new())
    {
        root = inlined;
    } else {
        root = Map::new();
    }
    root.remove("$defs");
    root.remove("definitions");
    merge_root_combinators(&mut root);
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

/// `value` with every local `$ref` replaced by what it points to in `root`.
fn inline_refs(value: &Value, root: &Value, inside: &mut Vec<String>) -> Value {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let target = reference
                    .strip_prefix('#')
                    .and_then(|pointer| root.pointer(pointer));
                let followable = inside.len() < MAX_REF_DEPTH && !inside.contains(reference);
                return match target {
                    Some(target) if followable => {
                        inside.push(reference.clone());
                        let inlined = inline_refs(target, root, inside);
                        inside.pop();
                        let mut inlined = match inlined {
                            Value::Object(inner) => inner,
                            other => return other,
                        };
                        // Keywords beside the reference (a description) win over the target's.
                        for (key, sibling) in map.iter().filter(|(k, _)| *k != "$ref") {
                            inlined.insert(key.clone(), inline_refs(sibling, root, inside));
                        }
                        Value::Object(inlined)
                    }
                    _ => {
                        let mut open: Map<String, Value> = map
                            .iter()
                            .filter(|(k, _)| *k == "description" || *k == "title")
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        open.remove("$ref");
                        Value::Object(open)
                    }
                };
            }
            Value::Object(
                map.iter()
                    .filter(|(key, _)| *key != "$defs" && *key != "definitions")
                    .map(|(key, inner)| (key.clone(), inline_refs(inner, root, inside)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|inner| inline_refs(inner, root, inside))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A root `anyOf`/`oneOf`/`allOf` whose branches are object schemas becomes one object with all
/// their properties; only `allOf` keeps the branches' `required` (for the others, which branch
/// applies is the model's choice, and the server still checks).
fn merge_root_combinators(root: &mut Map<String, Value>) {
    for keyword in ["anyOf", "oneOf", "allOf"] {
        let Some(Value::Array(branches)) = root.get(keyword) else {
            continue;
        };
        let objects: Option<Vec<Map<String, Value>>> = branches
            .iter()
            .map(|branch| match branch {
                Value::Object(b) if b.get("type").is_none_or(|t| t == "object") => Some(b.clone()),
                _ => None,
            })
            .collect();
        let Some(objects) = objects else {
            continue;
        };
        let mut properties = match root.remove("properties") {
            Some(Value::Object(p)) => p,
            _ => Map::new(),
        };
        let mut required: Vec<Value> = match root.remove("required") {
            Some(Value::Array(r)) => r,
            _ => Vec::new(),
        };
        for branch in &objects {
            if let Some(Value::Object(p)) = branch.get("properties") {
                for (name, schema) in p {
                    properties
                        .entry(name.clone())
                        .or_insert_with(|| schema.clone());
                }
            }
            if keyword == "allOf"
                && let Some(Value::Array(r)) = branch.get("required")
            {
                required.extend(
                    r.iter()
                        .filter(|n| !required.contains(n))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
            }
        }
        root.remove(keyword);
        root.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            root.insert("required".into(), Value::Array(required));
        }
    }
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

    #[test]
    fn local_references_are_inlined_and_cycles_left_open() {
        let schema = json!({
            "type": "object",
            "properties": {
                "where": {"$ref": "#/$defs/Place", "description": "Where to go"},
                "tree": {"$ref": "#/$defs/Node"}
            },
            "$defs": {
                "Place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}
            }
        });
        let sent = provider_schema(&schema);
        assert!(sent.get("$defs").is_none());
        assert_eq!(
            sent["properties"]["where"],
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "description": "Where to go"})
        );
        assert!(!sent.to_string().contains("$ref"), "{sent}");
        // A recursive type is followed once, then left open.
        assert_eq!(
            sent["properties"]["tree"],
            json!({"type": "object", "properties": {"child": {}}})
        );
        // Old-style definitions, and a reference nobody can follow, become open schemas.
        let sent = provider_schema(&json!({"properties": {
            "a": {"$ref": "#/definitions/A"}, "b": {"$ref": "https://example.com/b.json"}},
            "definitions": {"A": {"type": "integer"}}}));
        assert_eq!(sent["properties"]["a"], json!({"type": "integer"}));
        assert_eq!(sent["properties"]["b"], json!({}));
    }

    #[test]
    fn a_root_combinator_becomes_one_object() {
        let sent = provider_schema(&json!({"anyOf": [
            {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        ]}));
        assert_eq!(
            sent,
            json!({"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}})
        );
        let sent = provider_schema(&json!({"allOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]}
        ]}));
        assert_eq!(sent["required"], json!(["a", "b"]));
    }
}
