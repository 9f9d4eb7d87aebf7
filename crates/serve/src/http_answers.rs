//! The bodies the HTTP edge reads itself and the answers it writes itself: a request's body
//! read whole under a size and time limit before it counts as in flight, answer bodies that
//! hold a request's bookkeeping until they are sent, and the refusals (401, 408, 413, 429, 503,
//! and JSON-RPC errors for bodies that are not messages), each saying what to change.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use crate::serve_auth::Refusal;

/// An answer's body.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// How long a client may take to send a request's body, from its headers on; a request is
/// counted against its client's requests in flight only once its body is in.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A response body that holds something (a request's [`InFlight`], a connection's busy mark)
/// until it is done or dropped.
pub(crate) struct Holding<T> {
    pub(crate) inner: Body,
    pub(crate) _held: T,
}

impl<T: Send + Sync + Unpin + 'static> http_body::Body for Holding<T> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// `request` with its body read whole (and the body's bytes, for the edge's own reading): at most `max` bytes, within [`BODY_READ_TIMEOUT`];
/// otherwise the answer that says which limit the client ran into (413 or 408).
pub(crate) async fn read_body(
    request: Request<Incoming>,
    max: usize,
) -> Result<(Request<Full<Bytes>>, Bytes), Response<Body>> {
    let (parts, body) = request.into_parts();
    let too_large = || {
        plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is over the gateway's limit of {max} bytes"),
        )
    };
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let limited = http_body_util::Limited::new(body, max);
    match tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await {
        Ok(Ok(collected)) => {
            let bytes = collected.to_bytes();
            Ok((Request::from_parts(parts, Full::new(bytes.clone())), bytes))
        }
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(error)) => Err(plain(
            StatusCode::BAD_REQUEST,
            &format!("the request body could not be read: {error}"),
        )),
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the request body did not arrive within {}s of its headers",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// The JSON-RPC error for a POST body rmcp could not read as a message (its 415 names why):
/// -32600 when it was JSON of the wrong shape, -32700 when it was not JSON.
pub(crate) async fn unreadable_message(response: Response<Body>) -> Response<Body> {
    use http_body_util::BodyExt;
    let why = match response.into_body().collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(never) => match never {},
    };
    let why = why
        .strip_prefix("fail to deserialize request body ")
        .unwrap_or(&why)
        .to_string();
    // serde_json's syntax errors (what a parser says of text that is not JSON); anything else
    // rmcp says is about the shape of JSON it did read.
    const SYNTAX: [&str; 15] = [
        "EOF while parsing",
        "expected `",
        "expected value",
        "expected ident",
        "invalid escape",
        "invalid number",
        "number out of range",
        "invalid unicode code point",
        "control character",
        "key must be a string",
        "lone leading surrogate",
        "trailing comma",
        "trailing characters",
        "unexpected end of hex escape",
        "recursion limit exceeded",
    ];
    let (code, what) = if SYNTAX.iter().any(|p| why.starts_with(p)) {
        (-32700, "Parse error: the body is not JSON")
    } else {
        (-32600, "Invalid Request: not a JSON-RPC message")
    };
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": code, "message": format!("{what} ({why})")}});
    let mut response = plain(StatusCode::BAD_REQUEST, &body.to_string());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *response.status_mut() = status;
    response
}

/// 429 with a JSON-RPC error naming the client and the limit.
pub(crate) fn too_many(client: &str, limit: usize) -> Response<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": format!(
            "too many requests in flight from {client} (the gateway allows {limit} at once); wait for some to finish and try again"
        )},
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON-RPC error body with 401 (and `WWW-Authenticate`, RFC 6750) or 503.
pub(crate) fn refused(refusal: &Refusal) -> Response<Body> {
    let (status, message) = match refusal {
        Refusal::Unauthorized(why) => (StatusCode::UNAUTHORIZED, format!("unauthorized: {why}")),
        Refusal::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, why.clone()),
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32001, "message": message},
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        // Quotes would end the parameter early; the JSON body carries the full text.
        let description = refusal.to_string().replace(['"', '\\'], "'");
        let challenge =
            format!("Bearer error=\"invalid_token\", error_description=\"{description}\"");
        if let Ok(value) = hyper::header::HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(hyper::header::WWW_AUTHENTICATE, value);
        }
    }
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
