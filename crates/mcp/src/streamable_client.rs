//! The Streamable HTTP client every connection speaks through, wrapped around reqwest's (plain
//! or signing requests in): it applies [`keep_legacy_task_fields`] to the event data of every
//! SSE response before rmcp decodes it, and it reports when the session's standalone GET
//! stream has been answered ([`StandaloneStream`]).
//!
//! Why the report: a server may send its own requests (an elicitation, a sampling) on the GET
//! stream, and the TypeScript SDK's server drops a message when no GET stream is open yet.
//! rmcp opens that stream from a task of its own after the handshake, which on a loaded machine
//! can come after our first tool call; the server's elicitation for that call is then lost and
//! the call hangs until its timeout. The connection waits for the answer before it is handed
//! out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use crate::legacy_fields::keep_legacy_task_fields;

/// Whether a session's standalone GET stream has been answered (opened, or refused with 405).
/// Clones share one state.
#[derive(Clone, Default)]
pub(crate) struct StandaloneStream(Arc<StandaloneState>);

#[derive(Default)]
struct StandaloneState {
    /// Set when a response named a session: only then does rmcp open the stream.
    session_given: AtomicBool,
    answered: tokio::sync::watch::Sender<bool>,
}

impl StandaloneStream {
    /// Waits, at most `within`, until the GET stream of a session-holding server has been
    /// answered; returns at once for a server that gave no session (rmcp opens none). Returns
    /// whether it is answered, or not expected.
    pub(crate) async fn settled(&self, within: Duration) -> bool {
        if !self.0.session_given.load(Ordering::SeqCst) {
            return true;
        }
        let mut answered = self.0.answered.subscribe();
        tokio::time::timeout(within, answered.wait_for(|done| *done))
            .await
            .is_ok_and(|result| result.is_ok())
    }

    fn saw(&self, response: &StreamableHttpPostResponse) {
        let session = match response {
            StreamableHttpPostResponse::Json(_, session)
            | StreamableHttpPostResponse::Sse(_, session) => session.is_some(),
            _ => false,
        };
        if session {
            self.0.session_given.store(true, Ordering::SeqCst);
        }
    }
}

/// A Streamable HTTP client that keeps the legacy task fields in SSE data and reports the
/// standalone stream. A plain JSON response arrives decoded already, so its legacy fields stay
/// lost; servers built on the TypeScript SDK answer with SSE.
#[derive(Clone)]
pub(crate) struct WatchedClient<C> {
    inner: C,
    standalone: StandaloneStream,
}

impl<C> WatchedClient<C> {
    /// Wraps `inner`, reporting its GET stream to `standalone`.
    pub(crate) fn new(inner: C, standalone: StandaloneStream) -> Self {
        Self { inner, standalone }
    }

    fn after_post(&self, response: StreamableHttpPostResponse) -> StreamableHttpPostResponse {
        self.standalone.saw(&response);
        match response {
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(keep_in_stream(stream), session)
            }
            other => other,
        }
    }

    fn after_get<E>(
        &self,
        outcome: Result<SseStream, StreamableHttpError<E>>,
    ) -> Result<SseStream, StreamableHttpError<E>>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        self.standalone.0.answered.send_replace(true);
        outcome.map(keep_in_stream)
    }
}

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

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for WatchedClient<C> {
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
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await?;
        Ok(self.after_post(response))
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
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        Ok(self.after_post(response))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
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
        let outcome = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.after_get(outcome)
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
        let outcome = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.after_get(outcome)
    }
}
