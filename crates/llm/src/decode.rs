//! Incremental decoders for streamed bodies: Server-Sent Events (OpenAI, Anthropic) and
//! newline-delimited JSON (Ollama). Chunks may split anywhere, even inside a UTF-8 sequence.

use futures::{Stream, StreamExt};

use crate::error::LlmError;
use crate::provider::{EventStream, StreamEvent};

/// One SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined by newlines.
    pub data: String,
}

/// Splits a byte stream into complete lines.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buffer: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes and returns the lines they complete (without the line ending).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(chunk);
        let mut lines = Vec::new();
        while let Some(at) = self.buffer.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buffer.drain(..=at).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            lines.push(String::from_utf8_lossy(&line).into_owned());
        }
        lines
    }

    /// What is left once the stream ends without a final newline.
    pub fn rest(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.buffer);
        let text = String::from_utf8_lossy(&rest).trim().to_string();
        (!text.is_empty()).then_some(text)
    }
}

/// Decodes Server-Sent Events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    lines: LineSplitter,
    event: Option<String>,
    data: Vec<String>,
}

impl SseDecoder {
    /// Feeds bytes and returns the events they complete.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for line in self.lines.feed(chunk) {
            if line.is_empty() {
                if !self.data.is_empty() || self.event.is_some() {
                    out.push(SseEvent {
                        event: self.event.take(),
                        data: self.data.join("\n"),
                    });
                    self.data.clear();
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "data" => self.data.push(value.to_string()),
                "event" => self.event = Some(value.to_string()),
                _ => {}
            }
        }
        out
    }
}

/// Turns a body stream into an event stream with a per-chunk decoding function.
pub fn decode_body<S, F>(body: S, mut decode: F) -> EventStream
where
    S: Stream<Item = Result<bytes::Bytes, LlmError>> + Send + 'static,
    F: FnMut(&[u8]) -> Result<Vec<StreamEvent>, LlmError> + Send + 'static,
{
    Box::pin(body.flat_map(move |chunk| {
        let items: Vec<Result<StreamEvent, LlmError>> = match chunk.and_then(|bytes| decode(&bytes))
        {
            Ok(events) => events.into_iter().map(Ok).collect(),
            Err(error) => vec![Err(error)],
        };
        futures::stream::iter(items)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_across_chunks() {
        let mut decoder = SseDecoder::default();
        assert!(
            decoder
                .feed(b"event: message_start\r\ndata: {\"a\"")
                .is_empty()
        );
        let events = decoder.feed(b":1}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\n");
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "x\ny".into()
                },
            ]
        );
    }

    #[test]
    fn utf8_split_inside_a_character_survives() {
        let mut lines = LineSplitter::default();
        let text = "héllo\n".as_bytes();
        assert!(lines.feed(&text[..2]).is_empty());
        assert_eq!(lines.feed(&text[2..]), vec!["héllo".to_string()]);
    }
}
