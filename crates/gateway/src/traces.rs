//! OpenTelemetry spans of the gateway: one per client request (kind server, named as the MCP
//! semantic conventions say: `tools/call everything__echo`), with a child per upstream call
//! (kind client). They go to whatever tracer provider the binary installed: OTLP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, otherwise the no-op provider, whose spans cost next to
//! nothing. Only the OpenTelemetry API is used here; the SDK and exporter live in the binary.

use std::future::Future;

use opentelemetry::trace::{FutureExt, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, global};

const TRACER: &str = "tether-gateway";

/// Runs `work` inside a span for one client request; an `Err` marks the span failed.
pub(crate) async fn client_request<T, E: std::fmt::Display>(
    method: &'static str,
    target: Option<&str>,
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
        .start(&tracer);
    let context = Context::current_with_span(span);
    let result = work.with_context(context.clone()).await;
    if let Err(error) = &result {
        context.span().set_status(Status::error(error.to_string()));
    }
    context.span().end();
    result
}

/// Runs `work`, a call to upstream server `server`, inside a child span of the current client
/// request; `failed` says from its output whether it failed, and why.
pub(crate) async fn upstream<T>(
    method: &'static str,
    server: &str,
    target: &str,
    work: impl Future<Output = T>,
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
    let output = work.with_context(context.clone()).await;
    if let Some(reason) = failed(&output) {
        context.span().set_status(Status::error(reason));
    }
    context.span().end();
    output
}

fn target_key(method: &str) -> &'static str {
    match method {
        "tools/call" => "gen_ai.tool.name",
        "prompts/get" => "gen_ai.prompt.name",
        "resources/read" => "mcp.resource.uri",
        _ => "mcp.target",
    }
}
