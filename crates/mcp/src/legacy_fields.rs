//! Fields of MCP 2025-11-25 that rmcp 3.11 does not model and would drop when it decodes a
//! message: a server's `capabilities.tasks` and each tool's `execution`. Wherever we see a
//! message before rmcp does (our stdio reader, our SSE reader, and the event data of
//! Streamable HTTP responses through [`KeepTaskFields`]), they are moved to where rmcp keeps
//! data (`capabilities.experimental.tasks`, the tool's `_meta`), and the connection reads them
//! back.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

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

/// A Streamable HTTP client that applies [`keep_legacy_task_fields`] to the event data of
/// every SSE response before rmcp decodes it. A plain JSON response arrives decoded already,
/// so its fields stay lost; servers built on the TypeScript SDK answer with SSE.
#[derive(Clone)]
pub(crate) struct KeepTaskFields<C>(pub(crate) C);

type SseStream = futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>;

fn keep_in_stream(stream: SseStream) -> SseStream {
    stream
        .map(|event| {
            event.map(|mut event| {
                if let Some(kept) = event
                    .data
                    .as_deref()
                    .and_then(|data| keep_legacy_task_fields(data.as_bytes()))
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                {
                    event.data = Some(kept);
                }
                event
            })
        })
        .boxed()
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for KeepTaskFields<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let response = self
            .0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await?;
        Ok(keep_in_response(response))
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let response = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        Ok(keep_in_response(response))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let stream = self
            .0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await?;
        Ok(keep_in_stream(stream))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let stream = self
            .0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(keep_in_stream(stream))
    }
}

fn keep_in_response(response: StreamableHttpPostResponse) -> StreamableHttpPostResponse {
    match response {
        StreamableHttpPostResponse::Sse(stream, session) => {
            StreamableHttpPostResponse::Sse(keep_in_stream(stream), session)
        }
        other => other,
    }
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
