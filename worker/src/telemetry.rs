//! Logs and traces of the `weir` process: `tracing` events to stderr, and, when an OTLP
//! endpoint is given, every `tracing` span exported as an OpenTelemetry span over OTLP/HTTP
//! (protobuf or JSON). The spans of an execution's steps and of its activities' attempts
//! are put in the execution's trace ([`set_parent`], with the context of
//! [`weir_core::trace`]); a batch's span, which serves many executions, is a trace of its own.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use weir_core::trace::TraceParent;

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (what every collector accepts).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/HTTP with JSON bodies.
    #[value(name = "http/json")]
    HttpJson,
}

/// Where to export spans.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// The collector's base URL (`http://collector:4318`); `/v1/traces` is added unless the
    /// URL has a path.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// The `service.name` of the spans.
    pub service_name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("the OTLP endpoint `{endpoint}`: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("the OTLP exporter to {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// What [`init`] installed; [`Telemetry::shutdown`] flushes the spans not yet exported.
#[must_use]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: the last spans may not have been exported: {e}");
        }
    }
}

/// The traces URL of `endpoint`: its own path if it has one, else `/v1/traces`.
fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let error = |reason: &str| TelemetryError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(|| error("not an http:// or https:// URL"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return Err(error("no host"));
    }
    Ok(if path.is_empty() {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    } else {
        endpoint.to_owned()
    })
}

/// Installs the process's subscriber: stderr logs filtered by `filter` (an `EnvFilter`
/// directive), and the OTLP exporter if `otlp` says where.
pub fn init(filter: &str, otlp: Option<&OtlpConfig>) -> Result<Telemetry, TelemetryError> {
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let filter = tracing_subscriber::EnvFilter::new(filter);
    let Some(otlp) = otlp else {
        tracing_subscriber::registry()
            .with(filter)
            .with(logs)
            .init();
        return Ok(Telemetry { provider: None });
    };
    let endpoint = traces_url(&otlp.endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint.clone())
        .with_protocol(match otlp.protocol {
            OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
            OtlpProtocol::HttpJson => Protocol::HttpJson,
        })
        .build()
        .map_err(|source| TelemetryError::Exporter {
            endpoint: endpoint.clone(),
            source,
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(otlp.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("weir");
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .init();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// Puts `span` in the trace of `trace` (a remote parent: the span of an execution, or the
/// caller's). Nothing happens without a trace, or when spans are not exported.
pub fn set_parent(span: &tracing::Span, trace: Option<TraceParent>) {
    let Some(trace) = trace else {
        return;
    };
    let context = SpanContext::new(
        TraceId::from_bytes(trace.trace_id),
        SpanId::from_bytes(trace.parent_id),
        TraceFlags::new(trace.flags),
        true,
        TraceState::default(),
    );
    let parent = opentelemetry::Context::new().with_remote_span_context(context);
    // An error only says the span is disabled (filtered out, or no OpenTelemetry layer).
    let _ = span.set_parent(parent);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_a_base_url_only() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c.example/otlp/v1/traces").unwrap(),
            "https://c.example/otlp/v1/traces"
        );
        assert!(traces_url("collector:4318").is_err());
        assert!(traces_url("http:///v1/traces").is_err());
    }
}
