//! OpenTelemetry spans of the gateway: one per client request (kind server, named as the MCP
//! semantic conventions say: `tools/call everything__echo`), with a child per upstream call
//! (kind client). They go to whatever tracer provider the binary installed: OTLP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, otherwise the no-op provider, whose spans cost next to
//! nothing. A client that sends a W3C `traceparent` (in `_meta` or as an HTTP header) gets
//! the request span as a child of its own, so one trace runs from the client through the
//! gateway. Only the OpenTelemetry API is used here; the SDK and exporter live in the binary.

use std::future::Future;

use opentelemetry::trace::{
    FutureExt, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue, global};

const TRACER: &str = "tether-gateway";

/// Runs `work` inside a span for one client request, a child of the client's `traceparent`
/// when it sent one; an `Err` marks the span failed.
pub(crate) async fn client_request<T, E: std::fmt::Display>(
    method: &'static str,
    target: Option<&str>,
    traceparent: Option<&str>,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let tracer = global::tracer(TRACER);
    let mut attributes = vec![KeyValue::new("mcp.method.name", method)];
    if let Some(target) = target {
        attributes.push(KeyValue::new(target_key(method), target.to_string()));
    }
    let span = tracer
        .span_builder(match target {
            Some(target) => format!("{method} {target}"),
            None => method.to_string(),
        })
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(
            &tracer,
            &traceparent.and_then(remote_parent).unwrap_or_default(),
        );
    let context = Context::current_with_span(span);
    let result = work.with_context(context.clone()).await;
    if let Err(error) = &result {
        context.span().set_status(Status::error(error.to_string()));
    }
    context.span().end();
    result
}

/// `work` in the current request's trace, for a task spawned away from the request (a held
/// call), which would otherwise start a trace of its own.
pub(crate) fn in_current_trace<F: Future>(work: F) -> impl Future<Output = F::Output> {
    work.with_context(Context::current())
}

/// Runs the call to upstream server `server` that `work` makes inside a child span of the
/// current client request; `work` gets the span's W3C `traceparent` (when traces are on) to
/// send upstream, so the server's own spans join the trace. `failed` says from its output
/// whether it failed, and why.
pub(crate) async fn upstream<T, F: Future<Output = T>>(
    method: &'static str,
    server: &str,
    target: &str,
    work: impl FnOnce(Option<String>) -> F,
    failed: impl FnOnce(&T) -> Option<String>,
) -> T {
    let tracer = global::tracer(TRACER);
    let span = tracer
        .span_builder(format!("{method} {target}"))
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new("mcp.method.name", method),
            KeyValue::new("server.name", server.to_string()),
            KeyValue::new(target_key(method), target.to_string()),
        ])
        .start_with_context(&tracer, &Context::current());
    let context = Context::current_with_span(span);
    let traceparent = traceparent(&context);
    let output = work(traceparent).with_context(context.clone()).await;
    if let Some(reason) = failed(&output) {
        context.span().set_status(Status::error(reason));
    }
    context.span().end();
    output
}

/// The W3C `traceparent` of the span in `context`; `None` when traces are off (the no-op
/// provider's spans carry no valid context).
fn traceparent(context: &Context) -> Option<String> {
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        )
    })
}

/// A W3C `traceparent` (`00-<trace id>-<parent span id>-<flags>`) as the remote parent of a
/// span; `None` for anything malformed, all-zero ids and the forbidden version `ff` included.
fn remote_parent(traceparent: &str) -> Option<Context> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let well_formed = [(version, 2), (trace, 32), (span, 16), (flags, 2)]
        .iter()
        .all(|(part, len)| part.len() == *len && hex(part));
    // Version 00 has exactly four fields; later versions may add more.
    if !well_formed || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let sampled = u8::from_str_radix(flags, 16).ok()? & 1;
    let parent = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(sampled),
        true,
        TraceState::default(),
    );
    Some(Context::new().with_remote_span_context(parent))
}

fn target_key(method: &str) -> &'static str {
    match method {
        "tools/call" => "gen_ai.tool.name",
        "prompts/get" => "gen_ai.prompt.name",
        "resources/read" => "mcp.resource.uri",
        _ => "mcp.target",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_w3c_defines_it() {
        let parent =
            remote_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let span = parent.span();
        let context = span.span_context();
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_remote() && context.is_sampled());
        // What goes upstream is read back the same way.
        let again = traceparent(&parent).unwrap();
        assert_eq!(
            again,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert!(traceparent(&Context::new()).is_none());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(remote_parent(bad).is_none(), "{bad}");
        }
    }
}
