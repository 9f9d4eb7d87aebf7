//! OpenTelemetry for `tether serve`: when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the gateway's spans (a span per client
//! request, a child per upstream call; see `tether-gateway`) are batched and sent over OTLP/HTTP
//! as JSON, through the reqwest client the rest of Tether uses. Unset, nothing is installed and
//! the spans go to OpenTelemetry's no-op provider.

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Sends OTLP requests with reqwest on the Tokio runtime. The SDK's batch processor exports
/// from a thread of its own, outside the runtime, so each request is spawned onto it.
#[derive(Debug)]
struct OtlpHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let (status, headers, body) = self
            .runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, headers, body))
            })
            .await??;
        let mut response = Response::builder().status(status);
        for (name, value) in &headers {
            response = response.header(name, value);
        }
        Ok(response.body(body)?)
    }
}

/// Installs the OTLP trace pipeline when the environment asks for one; the provider is
/// returned so the caller can flush it at shutdown. A broken setting is reported and
/// tracing stays off: it must never stop the gateway.
pub fn install() -> Option<SdkTracerProvider> {
    let wanted = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|value| !value.is_empty()));
    if !wanted {
        return None;
    }
    if let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
        && protocol != "http/json"
    {
        safe_eprintln!(
            "tether serve: OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; traces are sent as http/json"
        );
    }
    let client = OtlpHttp {
        client: tether_mcp::http_client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .ok()?,
        runtime: tokio::runtime::Handle::try_current().ok()?,
    };
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_http_client(client)
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            safe_eprintln!("tether serve: OpenTelemetry traces are off: {error}");
            return None;
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name("tether")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    Some(provider)
}
