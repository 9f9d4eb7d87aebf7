//! What a served HTTP endpoint reports about itself: Prometheus metrics at `/metrics` (HTTP
//! requests by status, tool calls by server, tool and outcome with a latency histogram, calls in
//! flight, refusals for too many concurrent requests, and each upstream server's health) and
//! readiness at `/readyz`. The serving layer counts what it sees; the service behind it (the
//! gateway) counts tool calls and says which upstream servers are up, through [`Readiness`].

use std::sync::Arc;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// How a tool call through the gateway ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CallOutcome {
    /// The tool answered (even with `isError`: the tool ran).
    Ok,
    /// The call failed: the server was unreachable, timed out or answered with an error.
    Error,
    /// The gateway refused it (approval rules, pins).
    Refused,
    /// The client cancelled it.
    Cancelled,
}

impl CallOutcome {
    fn label(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Error => "error",
            CallOutcome::Refused => "refused",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// The served endpoint's metrics, shared by the HTTP layer and the service.
pub struct ServeMetrics {
    registry: Registry,
    http_requests: IntCounterVec,
    /// `http_requests` with status 200, looked up once: most requests count there.
    http_ok: prometheus::IntCounter,
    hot_path: prometheus::IntCounter,
    throttled: IntCounterVec,
    in_flight: IntGauge,
    sessions: IntGauge,
    connections: IntGauge,
    connections_closed: IntCounterVec,
    tool_calls: IntCounterVec,
    tool_seconds: HistogramVec,
    upstream_up: IntGaugeVec,
}

impl std::fmt::Debug for ServeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServeMetrics")
    }
}

impl ServeMetrics {
    /// A fresh set of metrics, every family registered.
    // Invariant: each family below has a fixed, valid metric name and label names, which is
    // all `new` checks, so the `expect`s cannot fire (the unit test builds them all).
    #[allow(clippy::expect_used)]
    pub fn new() -> Arc<ServeMetrics> {
        let registry = Registry::new();
        let http_requests = IntCounterVec::new(
            Opts::new(
                "tether_http_requests_total",
                "HTTP requests to the MCP endpoint, by status code.",
            ),
            &["status"],
        )
        .expect("a fixed, valid metric family");
        let throttled = IntCounterVec::new(
            Opts::new(
                "tether_http_throttled_total",
                "Requests refused (429) because the client had too many in flight, by client.",
            ),
            &["client"],
        )
        .expect("a fixed, valid metric family");
        let in_flight = IntGauge::new(
            "tether_http_requests_in_flight",
            "MCP requests being answered now.",
        )
        .expect("a fixed, valid metric family");
        let sessions = IntGauge::new(
            "tether_http_sessions_open",
            "2025-11-25 sessions open on this replica.",
        )
        .expect("a fixed, valid metric family");
        let connections = IntGauge::new(
            "tether_http_connections_open",
            "HTTP connections open on this replica (capped by --max-connections).",
        )
        .expect("a fixed, valid metric family");
        let connections_closed = IntCounterVec::new(
            Opts::new(
                "tether_http_connections_closed_total",
                "HTTP connections the gateway closed itself, by reason: `idle` to make room at the connection cap, `busy` refused at the cap, `stalled` when the client read none of an answer.",
            ),
            &["reason"],
        )
        .expect("a fixed, valid metric family");
        let tool_calls = IntCounterVec::new(
            Opts::new(
                "tether_tool_calls_total",
                "Tool calls through the gateway, by upstream server, tool and outcome.",
            ),
            &["server", "tool", "outcome"],
        )
        .expect("a fixed, valid metric family");
        let tool_seconds = HistogramVec::new(
            HistogramOpts::new(
                "tether_tool_call_duration_seconds",
                "Time from a client's tool call to the upstream answer, by server and tool.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ]),
            &["server", "tool"],
        )
        .expect("a fixed, valid metric family");
        let hot_path = prometheus::IntCounter::new(
            "tether_http_hot_path_calls_total",
            "Tool calls answered on the gateway's hot path (a plain call passed to a stdio server undecoded, past rmcp's session layer).",
        )
        .expect("a fixed, valid metric family");
        let upstream_up = IntGaugeVec::new(
            Opts::new(
                "tether_upstream_up",
                "1 when the upstream server is connected, 0 when it is down or failed to start.",
            ),
            &["server"],
        )
        .expect("a fixed, valid metric family");
        for collector in [
            Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(throttled.clone()),
            Box::new(in_flight.clone()),
            Box::new(sessions.clone()),
            Box::new(connections.clone()),
            Box::new(connections_closed.clone()),
            Box::new(tool_calls.clone()),
            Box::new(tool_seconds.clone()),
            Box::new(upstream_up.clone()),
            Box::new(hot_path.clone()),
        ] {
            if let Err(error) = registry.register(collector) {
                tracing::warn!(%error, "a metric family is not registered");
            }
        }
        let http_ok = http_requests.with_label_values(&["200"]);
        Arc::new(ServeMetrics {
            registry,
            http_requests,
            http_ok,
            hot_path,
            throttled,
            in_flight,
            sessions,
            connections,
            connections_closed,
            tool_calls,
            tool_seconds,
            upstream_up,
        })
    }

    /// Counts one answered HTTP request.
    pub fn http_request(&self, status: u16) {
        if status == 200 {
            self.http_ok.inc();
            return;
        }
        self.http_requests
            .with_label_values(&[&status.to_string()])
            .inc();
    }

    /// Counts a call answered on the hot path.
    pub(crate) fn hot_path_call(&self) {
        self.hot_path.inc();
    }

    /// Counts a request refused for too many in flight from `client`.
    pub fn throttled(&self, client: &str) {
        self.throttled.with_label_values(&[client]).inc();
    }

    /// Sets the number of sessions open.
    pub fn sessions_open(&self, open: usize) {
        self.sessions.set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Sets the number of HTTP connections open.
    pub fn connections_open(&self, open: usize) {
        self.connections
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Counts a connection the gateway closed itself, for `reason` (`idle`, `busy`, `stalled`).
    pub fn connection_closed(&self, reason: &str) {
        self.connections_closed.with_label_values(&[reason]).inc();
    }

    /// The gauge of requests in flight.
    pub(crate) fn in_flight(&self) -> &IntGauge {
        &self.in_flight
    }

    /// Records one tool call and how long it took.
    pub fn tool_call(&self, server: &str, tool: &str, outcome: CallOutcome, seconds: f64) {
        self.tool_calls
            .with_label_values(&[server, tool, outcome.label()])
            .inc();
        if outcome != CallOutcome::Refused {
            self.tool_seconds
                .with_label_values(&[server, tool])
                .observe(seconds);
        }
    }

    /// Sets whether `server` is up.
    pub fn upstream(&self, server: &str, up: bool) {
        self.upstream_up
            .with_label_values(&[server])
            .set(i64::from(up));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(%error, "encoding metrics");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// What the service behind the endpoint says about its readiness and upstream health.
pub trait Readiness: Send + Sync + 'static {
    /// `Ok` while the service can answer requests; the reason otherwise (`/readyz` → 503).
    fn ready(&self) -> Result<(), String>;
    /// Brings the upstream gauges up to date before `/metrics` is rendered.
    fn observe(&self, _metrics: &ServeMetrics) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_in_the_prometheus_text_format() {
        let metrics = ServeMetrics::new();
        metrics.http_request(200);
        metrics.http_request(200);
        metrics.tool_call("time", "get_current_time", CallOutcome::Ok, 0.003);
        metrics.tool_call("time", "get_current_time", CallOutcome::Refused, 0.0);
        metrics.upstream("time", true);
        metrics.upstream("files", false);
        let text = metrics.render();
        assert!(
            text.contains("tether_http_requests_total{status=\"200\"} 2"),
            "{text}"
        );
        assert!(text.contains(
            "tether_tool_calls_total{outcome=\"ok\",server=\"time\",tool=\"get_current_time\"} 1"
        ));
        assert!(text.contains(
            "tether_tool_call_duration_seconds_bucket{server=\"time\",tool=\"get_current_time\",le=\"0.005\"} 1"
        ));
        assert!(text.contains("tether_upstream_up{server=\"files\"} 0"));
        assert!(text.contains("# TYPE tether_tool_call_duration_seconds histogram"));
    }
}
