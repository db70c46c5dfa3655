//! `[tracing]`: distributed tracing, spans exported over OTLP (off unless an endpoint is
//! set, here or in the standard `OTEL_EXPORTER_OTLP_ENDPOINT`). Each key left unset
//! falls back on its standard `OTEL_*` variable, then on the default below: a setting
//! here wins over the environment, as everywhere in this configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[tracing]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The collector's OTLP base URL (`http://collector:4318` for HTTP/protobuf, whose
    /// traces go to `/v1/traces` under it; `http://collector:4317` for gRPC). Unset:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as given), then
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; neither: no span is exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`. Unset: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, then
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, then `http/protobuf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtlpProtocol>,
    /// The share (0 to 1) of traces the gateway starts that are sampled; a request
    /// whose `traceparent` says whether its caller sampled it follows the caller
    /// (parent-based). Unset: `OTEL_TRACES_SAMPLER` (and `_ARG`), then every trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
    /// `service.name` of the spans. Unset: `OTEL_SERVICE_NAME` (or `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`), then `idemgate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Finished spans waiting for export at most; beyond, spans are dropped (counted in
    /// `idemgate_trace_spans_dropped_total`) rather than slowing a request or growing.
    pub queue_spans: usize,
    /// How long one export may take before it is given up (its spans dropped).
    #[serde(with = "humantime_serde")]
    pub export_timeout: Duration,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: None,
            sample_ratio: None,
            service_name: None,
            queue_spans: 2048,
            export_timeout: Duration::from_secs(5),
        }
    }
}

impl TracingConfig {
    /// The bounds of `[tracing]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if let Some(ratio) = self.sample_ratio.filter(|r| !(0.0..=1.0).contains(r)) {
            let message = format!("must be from 0 to 1 (got {ratio})");
            return Err(ConfigError::invalid("tracing.sample_ratio", message));
        }
        if self.queue_spans == 0 {
            return Err(ConfigError::invalid(
                "tracing.queue_spans",
                "must be at least 1",
            ));
        }
        if self.export_timeout.is_zero() {
            return Err(ConfigError::invalid(
                "tracing.export_timeout",
                "must be positive",
            ));
        }
        Ok(())
    }
}

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    /// OTLP over HTTP, protobuf bodies (port 4318).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP over gRPC (port 4317).
    #[serde(rename = "grpc")]
    Grpc,
}

impl OtlpProtocol {
    /// The protocol an `OTEL_EXPORTER_OTLP_*PROTOCOL` value names (`http/json` is not
    /// offered).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "http/protobuf" => Some(Self::HttpProtobuf),
            "grpc" => Some(Self::Grpc),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_read_as_the_otel_variables_spell_them() {
        assert_eq!(
            OtlpProtocol::parse("http/protobuf"),
            Some(OtlpProtocol::HttpProtobuf)
        );
        assert_eq!(OtlpProtocol::parse(" grpc"), Some(OtlpProtocol::Grpc));
        assert_eq!(OtlpProtocol::parse("http/json"), None);
        let parsed: TracingConfig = toml::from_str("protocol = \"grpc\"").unwrap();
        assert_eq!(parsed.protocol, Some(OtlpProtocol::Grpc));
        assert!(toml::from_str::<TracingConfig>("protocol = \"http\"").is_err());
    }

    #[test]
    fn the_bounds_name_their_key() {
        let ratio = TracingConfig {
            sample_ratio: Some(1.5),
            ..TracingConfig::default()
        };
        assert!(ratio
            .check()
            .unwrap_err()
            .to_string()
            .contains("tracing.sample_ratio"));
        let queue = TracingConfig {
            queue_spans: 0,
            ..TracingConfig::default()
        };
        assert!(queue
            .check()
            .unwrap_err()
            .to_string()
            .contains("tracing.queue_spans"));
        assert!(TracingConfig::default().check().is_ok());
    }
}
