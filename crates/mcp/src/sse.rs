//! The deprecated HTTP+SSE transport (protocol 2024-11-05), for servers that still speak it:
//! a long-lived `GET` whose server-sent events carry the server's messages, the first one
//! (`endpoint`) naming where to `POST` ours. rmcp dropped its client for this transport, so
//! this is a small one over reqwest with its own event-stream parser.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;

/// Why the SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// The HTTP request failed or was refused.
    #[error("{0}")]
    Http(String),
    /// The event stream ended or never named its endpoint.
    #[error("{0}")]
    Stream(String),
}

/// One parsed server-sent event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:` (empty means `message`).
    pub event: String,
    /// `data:` lines joined with newlines.
    pub data: String,
}

/// Incremental `text/event-stream` parser: feed bytes, take complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line not yet ended. Kept as bytes: a chunk may end inside a multi-byte
    /// character, and only a whole line is sure to hold whole characters.
    buffer: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    /// Adds bytes and returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let bytes: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&bytes);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if self.has_data {
                    events.push(std::mem::take(&mut self.current));
                }
                self.current = SseEvent::default();
                self.has_data = false;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.current.event = value.to_string(),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        events
    }
}

/// A connected legacy SSE session.
pub struct SseTransport {
    client: reqwest::Client,
    endpoint: String,
    headers: HashMap<String, String>,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event.
    pub async fn connect(
        url: &str,
        headers: &HashMap<String, String>,
        timeout: Duration,
    ) -> Result<SseTransport, SseError> {
        let client = crate::http_client::builder()
            .connect_timeout(timeout)
            .build()
            .map_err(|e| SseError::Http(e.to_string()))?;
        let mut request = client.get(url).header("accept", "text/event-stream");
        for (key, value) in headers {
            request = request.header(key, value);
        }
        let response = tokio::time::timeout(timeout, request.send())
            .await
            .map_err(|_| SseError::Http(format!("GET {url} timed out")))?
            .map_err(|e| SseError::Http(format!("GET {url}: {e}")))?;
        if !response.status().is_success() {
            return Err(SseError::Http(format!(
                "GET {url} answered {}",
                response.status()
            )));
        }
        let base = response.url().clone();
        let mut body = response.bytes_stream();
        let mut parser = SseParser::default();
        let mut pending = Vec::new();
        let endpoint = tokio::time::timeout(timeout, async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| SseError::Stream(e.to_string()))?;
                for event in parser.feed(&chunk) {
                    if event.event == "endpoint" {
                        return endpoint_for(&base, &event.data);
                    }
                    pending.push(event);
                }
            }
            Err(SseError::Stream(
                "the event stream ended before naming its endpoint".into(),
            ))
        })
        .await
        .map_err(|_| SseError::Stream(format!("{url} sent no endpoint event")))??;

        let (sender, incoming) = mpsc::channel(64);
        let reader = tokio::spawn(async move {
            let deliver = |event: SseEvent| {
                let sender = sender.clone();
                async move {
                    if !event.event.is_empty() && event.event != "message" {
                        return true;
                    }
                    let kept = crate::legacy_fields::keep_legacy_task_fields(event.data.as_bytes());
                    let parsed = match &kept {
                        Some(bytes) => serde_json::from_slice::<ServerJsonRpcMessage>(bytes),
                        None => serde_json::from_str::<ServerJsonRpcMessage>(&event.data),
                    };
                    match parsed {
                        Ok(message) => sender.send(message).await.is_ok(),
                        Err(e) => {
                            tracing::warn!("dropping an SSE event that is not JSON-RPC: {e}");
                            true
                        }
                    }
                }
            };
            for event in pending {
                if !deliver(event).await {
                    return;
                }
            }
            while let Some(Ok(chunk)) = body.next().await {
                for event in parser.feed(&chunk) {
                    if !deliver(event).await {
                        return;
                    }
                }
            }
        });
        Ok(SseTransport {
            client,
            endpoint,
            headers: headers.clone(),
            incoming,
            reader,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let mut request = self.client.post(&self.endpoint).json(&item);
        for (key, value) in &self.headers {
            request = request.header(key, value);
        }
        let endpoint = self.endpoint.clone();
        async move {
            let response = request
                .send()
                .await
                .map_err(|e| SseError::Http(format!("POST {endpoint}: {e}")))?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(SseError::Http(format!(
                    "POST {endpoint} answered {}",
                    response.status()
                )))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.reader.abort();
        Ok(())
    }
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Where the `endpoint` event says to POST, held to the event stream's own origin: the URL
/// comes from the server, and our requests carry the configured headers (tokens included),
/// so a server must not be able to send them to another host (the cloud metadata service, a
/// machine on the user's network).
fn endpoint_for(stream: &reqwest::Url, data: &str) -> Result<String, SseError> {
    let endpoint = stream
        .join(data.trim())
        .map_err(|e| SseError::Stream(format!("bad endpoint event: {e}")))?;
    use crate::oauth_guard::origin;
    if origin(&endpoint) != origin(stream) {
        return Err(SseError::Stream(format!(
            "refused endpoint {endpoint}: it is not on the event stream's origin ({}://{}); a legacy SSE server must take messages where it streams them",
            stream.scheme(),
            stream.host_str().unwrap_or_default()
        )));
    }
    Ok(endpoint.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_must_be_on_the_streams_origin() {
        let stream = reqwest::Url::parse("http://127.0.0.1:3001/sse").unwrap();
        assert_eq!(
            endpoint_for(&stream, "/message?sessionId=1\n").unwrap(),
            "http://127.0.0.1:3001/message?sessionId=1"
        );
        for hostile in [
            "http://169.254.169.254/latest/meta-data/",
            "//10.0.0.1/message",
            "https://127.0.0.1:3001/message",
            "http://127.0.0.1:3002/message",
        ] {
            let error = endpoint_for(&stream, hostile).unwrap_err().to_string();
            assert!(
                error.contains("not on the event stream's origin"),
                "{hostile}: {error}"
            );
        }
    }

    #[test]
    fn events_are_split_across_chunks_and_multi_line_data_is_joined() {
        let mut parser = SseParser::default();
        assert!(
            parser
                .feed(b"event: endpoint\ndata: /message?sess")
                .is_empty()
        );
        let events = parser.feed(b"ionId=1\n\n: keep-alive\n\ndata: {\"a\":\r\ndata: 1}\n\n");
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: "endpoint".into(),
                    data: "/message?sessionId=1".into()
                },
                SseEvent {
                    event: String::new(),
                    data: "{\"a\":\n1}".into()
                },
            ]
        );
    }

    #[test]
    fn a_character_split_across_chunks_survives() {
        let mut parser = SseParser::default();
        let text = "data: {\"city\": \"Zürich ☀\"}\n\n".as_bytes();
        // Split inside "ü" (two bytes) and inside "☀" (three).
        let u = text.iter().position(|b| *b == 0xC3).unwrap();
        let sun = text.iter().position(|b| *b == 0xE2).unwrap();
        let mut events = parser.feed(&text[..u + 1]);
        events.extend(parser.feed(&text[u + 1..sun + 2]));
        events.extend(parser.feed(&text[sun + 2..]));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "{\"city\": \"Zürich ☀\"}");
    }

    proptest::proptest! {
        /// However the stream is cut into chunks, the same events come out.
        #[test]
        fn chunking_never_changes_the_events(
            events in proptest::collection::vec(("[a-z]{0,8}", "\\PC{0,40}"), 0..8),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let mut stream = String::new();
            for (event, data) in &events {
                if !event.is_empty() {
                    stream.push_str(&format!("event: {event}\n"));
                }
                stream.push_str(&format!("data: {data}\n\n"));
            }
            let bytes = stream.as_bytes();
            let mut whole = SseParser::default();
            let expected = whole.feed(bytes);
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut chunked = SseParser::default();
            let mut got = Vec::new();
            let mut from = 0;
            for at in points.into_iter().chain([bytes.len()]) {
                got.extend(chunked.feed(&bytes[from..at]));
                from = at;
            }
            proptest::prop_assert_eq!(&got, &expected);
            proptest::prop_assert_eq!(got.len(), events.len());
        }

        /// Arbitrary bytes never panic the parser.
        #[test]
        fn any_bytes_are_parsed_without_panicking(chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..8)) {
            let mut parser = SseParser::default();
            for chunk in chunks {
                let _ = parser.feed(&chunk);
            }
        }
    }
}
