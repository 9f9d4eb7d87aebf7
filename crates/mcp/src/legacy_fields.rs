//! Fields of MCP 2025-11-25 that rmcp 3.11 does not model and would drop when it decodes a
//! message: a server's `capabilities.tasks` and each tool's `execution`. Wherever we see a
//! message before rmcp does (our stdio reader, our SSE reader, and the event data of
//! Streamable HTTP responses through `streamable_client`), they are moved to where rmcp keeps
//! data (`capabilities.experimental.tasks`, the tool's `_meta`), and the connection reads them
//! back.

/// Where a tool's `execution` object travels past rmcp, whose `Tool` has no such field: in
/// the tool's `_meta`, from which the connection takes it back when it lists tools.
pub(crate) const EXECUTION_META: &str = "dev.tether/execution";

/// rmcp 3.11 models the 2026-07-28 tasks extension but not 2025-11-25's tasks: it drops a
/// server's `capabilities.tasks` and each tool's `execution`. This moves them where rmcp
/// keeps them (`capabilities.experimental.tasks`, the tool's `_meta`) so the connection can
/// read them back. `None` when the line holds neither; most lines are not even parsed.
pub(crate) fn keep_legacy_task_fields(line: &[u8]) -> Option<Vec<u8>> {
    use serde_json::{Map, Value};
    let mentions = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
    if !mentions(b"\"tasks\"") && !mentions(b"\"execution\"") {
        return None;
    }
    let mut message: Value = serde_json::from_slice(line).ok()?;
    let result = message.get_mut("result")?.as_object_mut()?;
    let mut changed = false;
    if let Some(capabilities) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
        && capabilities.get("tasks").is_some_and(Value::is_object)
        && let Some(tasks) = capabilities.remove("tasks")
    {
        let experimental = capabilities
            .entry("experimental")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(experimental) = experimental.as_object_mut() {
            experimental.insert("tasks".into(), tasks);
            changed = true;
        }
    }
    if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
        for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
            let Some(execution) = tool.remove("execution") else {
                continue;
            };
            let meta = tool
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(EXECUTION_META.into(), execution);
                changed = true;
            }
        }
    }
    if !changed {
        return None;
    }
    serde_json::to_vec(&message).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_task_fields_move_where_rmcp_keeps_them() {
        let initialize = br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"list":{},"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"x","version":"1"}}}"#;
        let moved: serde_json::Value =
            serde_json::from_slice(&keep_legacy_task_fields(initialize).unwrap()).unwrap();
        let capabilities = &moved["result"]["capabilities"];
        assert!(capabilities.get("tasks").is_none());
        assert_eq!(
            capabilities["experimental"]["tasks"]["requests"]["tools"]["call"],
            serde_json::json!({})
        );
        let tools = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},{"name":"b","inputSchema":{"type":"object"}}]}}"#;
        let moved: serde_json::Value =
            serde_json::from_slice(&keep_legacy_task_fields(tools).unwrap()).unwrap();
        assert_eq!(
            moved["result"]["tools"][0]["_meta"][EXECUTION_META]["taskSupport"],
            "required"
        );
        assert!(moved["result"]["tools"][1].get("_meta").is_none());
        // Anything else passes untouched, without being parsed.
        assert_eq!(
            keep_legacy_task_fields(br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#),
            None
        );
    }
}
