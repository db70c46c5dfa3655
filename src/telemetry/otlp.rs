//! The span pipeline of `[tracing]`: which collector, how (HTTP/protobuf or gRPC),
//! which traces are sampled and under which service name, each read from the section,
//! then from the standard `OTEL_*` variables, then the defaults; and the tracer
//! provider built on them ([`super::export`]'s queue and runtime).

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

use super::export::{Bounded, ExportRuntime, OnRuntime, OtlpHttp};
use crate::config::{redact_url, OtlpProtocol, TracingConfig};

/// Why tracing could not start (the process does not).
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("{var}: `{value}` is not an OTLP protocol idemgate offers (http/protobuf, grpc)")]
    Protocol { var: &'static str, value: String },
    #[error("{var}: `{value}` is not a sampler idemgate reads (always_on, always_off, traceidratio, parentbased_*; a ratio from 0 to 1)")]
    Sampler { var: &'static str, value: String },
    #[error("tracing: cannot start the export thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("tracing: the OTLP exporter for {endpoint}: {message}")]
    Exporter { endpoint: String, message: String },
}

/// The running pipeline: shut down (what is queued exported, within a few seconds)
/// when dropped.
pub struct Exporting {
    pub provider: SdkTracerProvider,
    /// Dropped after the provider's shutdown, which exports on it.
    runtime: Option<ExportRuntime>,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(3));
        drop(self.runtime.take());
    }
}

/// Where spans go, once read: `None` when no endpoint is set anywhere (or
/// `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub protocol: OtlpProtocol,
    /// The URL the exporter posts to (HTTP: with `/v1/traces`).
    pub endpoint: String,
}

/// An environment variable, if set and not empty.
pub(super) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Target {
    pub fn read(config: &TracingConfig) -> Result<Option<Target>, TracingError> {
        let off = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        if off && config.endpoint.is_none() {
            return Ok(None);
        }
        let protocol = match config.protocol {
            Some(p) => p,
            None => protocol_from_env()?.unwrap_or(OtlpProtocol::HttpProtobuf),
        };
        let with_path = |base: &str| match protocol {
            OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
            OtlpProtocol::Grpc => base.to_string(),
        };
        let endpoint = match (&config.endpoint, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(base), _) => with_path(base),
            (None, Some(verbatim)) => verbatim,
            (None, None) => match env("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => with_path(&base),
                None => return Ok(None),
            },
        };
        Ok(Some(Target { protocol, endpoint }))
    }
}

fn protocol_from_env() -> Result<Option<OtlpProtocol>, TracingError> {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = env(var) {
            let protocol = OtlpProtocol::parse(&value);
            return protocol
                .map(Some)
                .ok_or(TracingError::Protocol { var, value });
        }
    }
    Ok(None)
}

/// Starts the pipeline to `target`.
pub fn start(config: &TracingConfig, target: &Target) -> Result<Exporting, TracingError> {
    let runtime = ExportRuntime::start()?;
    let failed = |e: &dyn std::fmt::Display| TracingError::Exporter {
        endpoint: redact_url(&target.endpoint),
        message: e.to_string(),
    };
    // Built in the export runtime: a gRPC channel starts its worker task there.
    let exporter = {
        let _in = runtime.handle.enter();
        let builder = SpanExporter::builder();
        match target.protocol {
            OtlpProtocol::HttpProtobuf => {
                let https = target.endpoint.starts_with("https://");
                let connector = crate::tls::upstream::shared(https).map_err(|e| failed(&e))?;
                (builder.with_http())
                    .with_http_client(OtlpHttp::new(connector))
                    .with_endpoint(&target.endpoint)
                    .with_timeout(config.export_timeout)
                    .build()
            }
            OtlpProtocol::Grpc => (builder.with_tonic())
                .with_endpoint(&target.endpoint)
                .with_timeout(config.export_timeout)
                .build(),
        }
        .map_err(|e| failed(&e))?
    };
    let queued = Arc::new(AtomicUsize::new(0));
    let exporter = OnRuntime::new(
        exporter,
        runtime.handle.clone(),
        queued.clone(),
        config.export_timeout,
    );
    let batches = BatchConfigBuilder::default()
        .with_max_queue_size(config.queue_spans)
        .with_max_export_batch_size(config.queue_spans.min(512))
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batches)
        .build();
    // Sampled at the head of each request (`super::sampling`): what reaches the SDK is
    // exported.
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Bounded::new(processor, queued, config.queue_spans))
        .with_resource(resource(config))
        .with_sampler(Sampler::AlwaysOn)
        .build();
    Ok(Exporting {
        provider,
        runtime: Some(runtime),
    })
}

/// `service.name` (the section's, `OTEL_SERVICE_NAME`'s or `OTEL_RESOURCE_ATTRIBUTES`',
/// else `idemgate`) and `service.version`.
fn resource(config: &TracingConfig) -> Resource {
    let from_env = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    let name = (config.service_name.clone()).or_else(|| (!from_env).then(|| "idemgate".into()));
    let mut resource = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(name) = name {
        resource = resource.with_service_name(name);
    }
    resource.build()
}
