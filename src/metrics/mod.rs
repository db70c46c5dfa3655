//! Prometheus metrics: the recorder, the metric names (a contract with dashboards and
//! alerts), and one small function per thing measured. Labels are bounded: route
//! name, outcome, operation or reason; never a key, a tenant or a raw path.
//!
//! One file per subsystem, each with its names, their descriptions and its recording
//! functions: [`requests`] (the request path), [`store`] (Redis, Postgres, the
//! breaker, fallbacks), [`write_through`], [`completer`], [`limits`] and [`live`]; this file
//! installs the recorder and counts the log lines dropped.

mod completer;
mod limits;
mod live;
mod requests;
mod store;
mod write_through;

use std::sync::OnceLock;
use std::time::Duration;

use metrics::counter;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub use completer::{completer_outcome, completer_pass, completer_takeover};
pub use limits::{limits_sampled, Limit};
pub use live::{live_answers, live_join_ended, live_joiners, Join};
pub use requests::{
    detached, detached_ended, unmatched, Detached, Outcome, Protocol, RouteMetrics, STORED_BYTES,
};
pub use store::{
    claim_vouch, elapsed, fallback, lapsed_takeover, lease_lost, lease_written_back, postgres_op,
    postgres_primary, postgres_up, redis_up, redis_wait_short, tier_disagreement, unreadable,
    RedisOps,
};
pub use write_through::{queue_depth, reaped, write_dropped, write_failure, DropReason};

pub const LOG_DROPPED: &str = "idemgate_log_lines_dropped_total";
pub const SPANS_DROPPED: &str = "idemgate_trace_spans_dropped_total";

/// Why finished spans were not exported (`[tracing]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanDrop {
    /// The export queue (`tracing.queue_spans`) was full.
    QueueFull,
    /// The collector refused the batch, could not be reached, or took longer than
    /// `tracing.export_timeout`.
    ExportFailed,
}

impl SpanDrop {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::ExportFailed => "export_failed",
        }
    }
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Seconds past `upstream_timeout`, up to the default `upstream_deadline`.
const OVERRUN_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
const SIZE_BUCKETS: &[f64] = &[
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];

/// Installs the process-wide recorder once and returns its handle for `/metrics`.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("duration_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(STORED_BYTES.into()), SIZE_BUCKETS)
                })
                .and_then(|b| {
                    let overrun = Matcher::Full(requests::DETACHED_OVERRUN.into());
                    b.set_buckets_for_metric(overrun, OVERRUN_BUCKETS)
                })
                .expect("static buckets are valid");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
            }
            describe();
            handle
        })
        .clone()
}

/// Describes every metric, and registers the counters that must be present from the
/// start (so that the first increment shows in `increase()`) and the gauges' first
/// values.
fn describe() {
    requests::describe();
    store::describe();
    write_through::describe();
    completer::describe();
    limits::describe();
    live::describe();
    metrics::describe_counter!(
        LOG_DROPPED,
        "Log lines dropped because stderr could not keep up."
    );
    metrics::describe_counter!(
        SPANS_DROPPED,
        "Finished spans not exported ([tracing]): the export queue was full (queue_full), \
         or the collector failed, was unreachable or too slow (export_failed)."
    );
    requests::start();
    store::start();
    write_through::start();
    completer::start();
    limits::start();
    live::start();
    counter!(LOG_DROPPED).absolute(0);
    for reason in [SpanDrop::QueueFull, SpanDrop::ExportFailed] {
        counter!(SPANS_DROPPED, "reason" => reason.as_str()).absolute(0);
    }
}

/// Drains histogram buckets now and then, as the recorder requires.
pub fn spawn_upkeep(handle: PrometheusHandle) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            handle.run_upkeep();
        }
    });
}

/// Counts `spans` finished spans that will not reach the collector.
pub fn spans_dropped(reason: SpanDrop, spans: usize) {
    counter!(SPANS_DROPPED, "reason" => reason.as_str()).increment(spans as u64);
}

/// Sets the dropped log lines counter (the writer thread counts them).
pub fn log_lines_dropped(total: u64) {
    counter!(LOG_DROPPED).absolute(total);
}
