//! Log and span set-up: `tracing` to stderr as text or JSON, filtered by `log.filter`
//! or `RUST_LOG`, written by a background thread so that a request never waits on
//! stderr; and, with `[tracing]`, spans exported over OTLP ([`otlp`], [`export`]) with
//! the W3C trace context of each request ([`context`]), by a dispatcher that only traced
//! requests run under ([`dispatch`]).
//!
//! Request threads hand each formatted line to the writer thread through a bounded
//! queue (`log.queue_lines`). The writer thread buffers what it receives and writes it
//! in large chunks, flushing whenever the queue runs empty. If stderr is slower than
//! the gateway (a full pipe, a stalled log collector), lines beyond the queue are
//! dropped rather than stalling requests; they are counted in
//! `idemgate_log_lines_dropped_total` and reported at shutdown.

pub mod context;
pub mod dispatch;
mod export;
pub mod otlp;
pub mod sampling;

use std::io::{BufWriter, IsTerminal};
use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use tracing::Dispatch;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer, Registry};

use self::otlp::{Exporting, Target, TracingError};
use self::sampling::Sampling;
use crate::config::{LogConfig, LogFormat, TracingConfig};

static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the writer thread; dropping it writes out what is still queued. Hold it in
/// `main` for as long as the process logs.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    /// Dropped first: what is queued is exported before the log writer stops.
    _spans: Option<Exporting>,
    _writer: WorkerGuard,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        drop(self._spans.take());
        let dropped = dropped_lines();
        if dropped > 0 {
            eprintln!("idemgate: {dropped} log lines were dropped because stderr fell behind");
        }
    }
}

/// Installs the global subscriber, and the span exporter where `[tracing]` (or the
/// `OTEL_*` environment) names a collector. Call once, from `main`.
pub fn init(config: &LogConfig, tracing: &TracingConfig) -> Result<LogGuard, TracingError> {
    let spans = match Target::read(tracing)? {
        Some(target) => {
            let sampling = Sampling::read(tracing)?;
            Some((otlp::start(tracing, &target)?, target, sampling))
        }
        None => None,
    };
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(config.queue_lines)
        .thread_name("idemgate-log")
        .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let _ = DROPPED.set(writer.error_counter());
    let directives = EnvFilter::try_from_default_env()
        .map(|f| f.to_string())
        .unwrap_or_else(|_| config.filter.clone());
    let ansi = std::io::stderr().is_terminal();
    // The global subscriber is the log's alone, exactly as before tracing existed; a
    // traced request runs under the exporter's dispatcher (`dispatch`).
    let logs = tracing_subscriber::fmt()
        .with_env_filter(log_filter(&directives))
        .with_ansi(ansi)
        .with_writer(writer.clone());
    let result = match config.format {
        LogFormat::Json => logs.json().flatten_event(true).try_init(),
        LogFormat::Text => logs.try_init(),
    };
    if let Some((exporting, _, _)) = &spans {
        let logs = tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer);
        let logs: Box<dyn Layer<Registry> + Send + Sync> = match config.format {
            LogFormat::Json => (logs.json().flatten_event(true))
                .with_filter(log_filter(&directives))
                .boxed(),
            LogFormat::Text => logs.with_filter(log_filter(&directives)).boxed(),
        };
        let registry = tracing_subscriber::registry().with(logs);
        let registry = registry.with(exported(&exporting.provider));
        dispatch::install(Dispatch::new(registry.with(dispatch::ExporterMark)));
    }
    if let Err(e) = result {
        eprintln!("idemgate: logging already initialised: {e}");
    }
    let spans = spans.map(|(exporting, target, sampling)| {
        context::set_exporting();
        sampling.install();
        tracing::info!(
            protocol = ?target.protocol,
            endpoint = %crate::config::redact_url(&target.endpoint),
            sample_ratio = sampling.ratio,
            parent_based = sampling.parent_based,
            "spans are exported over OTLP"
        );
        exporting
    });
    Ok(LogGuard {
        _spans: spans,
        _writer: guard,
    })
}

/// The log filter `directives`; the phase spans are the exporter's alone
/// (`context::PHASE`).
fn log_filter(directives: &str) -> EnvFilter {
    let phases = format!("{}=off", context::PHASE);
    EnvFilter::new(directives).add_directive(phases.parse().expect("a directive"))
}

/// The exporter's layer: the spans of traced requests (target [`context::TRACED`]) and
/// their phases ([`context::PHASE`]), decided once per call site; no events (they stay
/// in the logs).
fn exported<S>(provider: &opentelemetry_sdk::trace::SdkTracerProvider) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let ours = filter_fn(|meta| {
        meta.is_span() && (meta.target() == context::TRACED || meta.target() == context::PHASE)
    });
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("idemgate"))
        .with_threads(false)
        .with_location(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Nothing reads OpenTelemetry's current context: spans are parented, injected
        // and linked from `tracing`'s.
        .with_context_activation(false)
        .with_filter(ours)
}

/// Log lines dropped so far because the writer thread fell behind.
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}
