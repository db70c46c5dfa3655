//! Prometheus metrics: the recorder, the metric names (a contract with dashboards and
//! alerts), and one small function per thing measured. Labels are bounded: route
//! name, outcome, operation or reason; never a key, a tenant or a raw path.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "idemgate_requests_total";
pub const REQUEST_DURATION: &str = "idemgate_request_duration_seconds";
pub const UNKEYED_REQUESTS: &str = "idemgate_unkeyed_requests_total";
pub const UPSTREAM_DURATION: &str = "idemgate_upstream_duration_seconds";
pub const REDIS_DURATION: &str = "idemgate_redis_duration_seconds";
pub const POSTGRES_DURATION: &str = "idemgate_postgres_duration_seconds";
pub const FALLBACK: &str = "idemgate_fallback_total";
pub const LEASE_LOST: &str = "idemgate_lease_lost_total";
pub const REDIS_WAIT_SHORT: &str = "idemgate_redis_wait_short_total";
pub const QUEUE_DEPTH: &str = "idemgate_write_through_queue_depth";
pub const LOG_DROPPED: &str = "idemgate_log_lines_dropped_total";
pub const WRITE_FAILURES: &str = "idemgate_write_through_failures_total";
pub const WRITE_DROPPED: &str = "idemgate_write_through_dropped_total";
pub const REAPED: &str = "idemgate_reaped_total";
pub const IN_FLIGHT: &str = "idemgate_in_flight";
pub const STORED_BYTES: &str = "idemgate_stored_response_bytes";
pub const REDIS_UP: &str = "idemgate_redis_up";
pub const TIER_DISAGREEMENTS: &str = "idemgate_tier_disagreements_total";
pub const LIMITED: &str = "idemgate_limited_total";
pub const OPEN_CONNECTIONS: &str = "idemgate_open_connections";
pub const BUFFERED_BYTES: &str = "idemgate_buffered_bytes";
pub const UNREADABLE: &str = "idemgate_stored_records_unreadable_total";
pub const COMPLETER_PASSES: &str = "idemgate_completer_passes_total";
pub const COMPLETER_TAKEOVERS: &str = "idemgate_completer_takeovers_total";
pub const COMPLETER_OUTCOMES: &str = "idemgate_completer_outcomes_total";

/// Every outcome of a completer attempt (`idemgate_completer_outcomes_total`):
/// `completed` (a response stored), `refused` (a release status) and `retry` (no
/// answer from the upstream), both tried again after the backoff, `given_up` (out of attempts, or a
/// kept request that cannot be read), `lease_lost`, `not_stored`, and the attempts that
/// found the key no longer abandoned: `already_completed`, `in_flight` (a client's
/// retry holds it), `mismatch`, `error` (the claim failed).
pub const COMPLETER_OUTCOME_NAMES: [&str; 10] = [
    "completed",
    "refused",
    "retry",
    "given_up",
    "lease_lost",
    "not_stored",
    "already_completed",
    "in_flight",
    "mismatch",
    "error",
];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const SIZE_BUCKETS: &[f64] = &[
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];

/// Every outcome, in [`Outcome`] order.
pub const OUTCOMES: [Outcome; 10] = [
    Outcome::Executed,
    Outcome::Replayed,
    Outcome::InFlight,
    Outcome::Mismatch,
    Outcome::InvalidKey,
    Outcome::MissingKey,
    Outcome::Bypassed,
    Outcome::UpstreamError,
    Outcome::StoreUnavailable,
    Outcome::Rejected,
];

/// How a keyed request ended, as counted in `idemgate_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Outcome {
    Executed,
    Replayed,
    InFlight,
    Mismatch,
    InvalidKey,
    MissingKey,
    Bypassed,
    UpstreamError,
    StoreUnavailable,
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::InFlight => "in_flight",
            Outcome::Mismatch => "mismatch",
            Outcome::InvalidKey => "invalid_key",
            Outcome::MissingKey => "missing_key",
            Outcome::Bypassed => "bypassed",
            Outcome::UpstreamError => "upstream_error",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Rejected => "rejected",
        }
    }
}

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

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(REQUESTS, "Keyed requests by route and outcome.");
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "End-to-end duration of keyed requests."
    );
    describe_counter!(
        UNKEYED_REQUESTS,
        "Requests proxied without idempotency (method not covered, or no key)."
    );
    describe_histogram!(UPSTREAM_DURATION, Unit::Seconds, "Upstream call duration.");
    describe_histogram!(
        REDIS_DURATION,
        Unit::Seconds,
        "Redis operation duration by op."
    );
    describe_histogram!(
        POSTGRES_DURATION,
        Unit::Seconds,
        "Postgres operation duration by op."
    );
    describe_counter!(
        FALLBACK,
        "Requests served through a fallback path, by reason."
    );
    describe_counter!(
        LEASE_LOST,
        "Completions refused because the lease had been taken over."
    );
    describe_gauge!(QUEUE_DEPTH, "Completed records waiting for Postgres.");
    describe_counter!(
        REDIS_WAIT_SHORT,
        "Completions that fewer replicas than redis.wait_replicas acknowledged in time."
    );
    describe_counter!(WRITE_FAILURES, "Failed write-through statements.");
    describe_counter!(
        WRITE_DROPPED,
        "Durable copies given up, by reason: queue_full (the retry queue was full), \
         refused (Postgres refused the record)."
    );
    describe_counter!(REAPED, "Expired records deleted from Postgres.");
    describe_counter!(
        LOG_DROPPED,
        "Log lines dropped because stderr could not keep up."
    );
    describe_gauge!(IN_FLIGHT, "Upstream calls running under a lease.");
    describe_histogram!(STORED_BYTES, Unit::Bytes, "Size of stored responses.");
    describe_counter!(
        TIER_DISAGREEMENTS,
        "Completions where Redis and Postgres disagreed about who holds a key, by kind."
    );
    describe_counter!(
        UNREADABLE,
        "Stored records that could not be read (answered 500, never replayed), by reason."
    );
    describe_gauge!(
        REDIS_UP,
        "1 while claims go to Redis, 0 while its breaker is open."
    );
    describe_counter!(
        COMPLETER_PASSES,
        "Completer passes, by result: ran (this replica took the pass), skipped (another \
         replica held it), failed (Postgres)."
    );
    describe_counter!(
        COMPLETER_TAKEOVERS,
        "Abandoned requests the completer took over (and sent again)."
    );
    describe_counter!(
        COMPLETER_OUTCOMES,
        "Completer attempts, by outcome (given_up: out of attempts or unreadable)."
    );
    // Present from the start, so that the first increment shows in increase().
    for name in [
        LEASE_LOST,
        WRITE_FAILURES,
        REAPED,
        LOG_DROPPED,
        REDIS_WAIT_SHORT,
    ] {
        counter!(name).absolute(0);
    }
    for reason in UNREADABLE_REASONS {
        counter!(UNREADABLE, "reason" => reason).absolute(0);
    }
    for outcome in COMPLETER_OUTCOME_NAMES {
        counter!(COMPLETER_OUTCOMES, "outcome" => outcome).absolute(0);
    }
    counter!(COMPLETER_TAKEOVERS).absolute(0);
    for reason in [DropReason::QueueFull, DropReason::Refused] {
        counter!(WRITE_DROPPED, "reason" => reason.as_str()).absolute(0);
    }
    gauge!(IN_FLIGHT).set(0.0);
    gauge!(QUEUE_DEPTH).set(0.0);
    gauge!(REDIS_UP).set(1.0);
    describe_limits();
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

/// One route's metric handles, registered once at start so that a request records
/// without building label sets or looking anything up.
pub struct RouteMetrics {
    requests: [(Counter, Histogram); 10],
    unkeyed: Counter,
    upstream: Histogram,
    /// Unlabelled, the same series for every route: kept here so that a request does
    /// not look them up.
    in_flight: Gauge,
    stored_bytes: Histogram,
}

impl RouteMetrics {
    pub fn new(route: &str) -> Self {
        let route = route.to_string();
        Self {
            requests: OUTCOMES.map(|o| {
                let labels = [
                    ("route", route.clone()),
                    ("outcome", o.as_str().to_string()),
                ];
                (
                    counter!(REQUESTS, &labels),
                    histogram!(REQUEST_DURATION, &labels),
                )
            }),
            unkeyed: counter!(UNKEYED_REQUESTS, "route" => route.clone()),
            upstream: histogram!(UPSTREAM_DURATION, "route" => route),
            in_flight: gauge!(IN_FLIGHT),
            stored_bytes: histogram!(STORED_BYTES),
        }
    }

    /// Counts an upstream call under a lease in `idemgate_in_flight` while the guard lives.
    pub fn in_flight(&self) -> InFlightGuard {
        InFlightGuard::on(self.in_flight.clone())
    }

    pub fn stored_bytes(&self, n: usize) {
        self.stored_bytes.record(n as f64);
    }

    pub fn request(&self, outcome: Outcome, started: Instant) {
        let (count, duration) = &self.requests[outcome as usize];
        count.increment(1);
        duration.record(started.elapsed().as_secs_f64());
    }

    pub fn unkeyed(&self) {
        self.unkeyed.increment(1);
    }

    pub fn upstream(&self, started: Instant) {
        self.upstream.record(started.elapsed().as_secs_f64());
    }
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteMetrics")
    }
}

/// Requests that matched no route.
pub fn unmatched(started: Instant) {
    let labels = [
        ("route", "_unmatched"),
        ("outcome", Outcome::Rejected.as_str()),
    ];
    counter!(REQUESTS, &labels).increment(1);
    histogram!(REQUEST_DURATION, &labels).record(started.elapsed().as_secs_f64());
}

/// `idemgate_redis_duration_seconds` of each Redis store operation, registered once (by
/// the Redis store, after [`install`]) so that a call does not look them up.
pub struct RedisOps {
    pub claim: Histogram,
    pub complete: Histogram,
    pub release: Histogram,
    pub extend: Histogram,
    pub peek: Histogram,
    pub invalidate: Histogram,
}

impl RedisOps {
    pub fn new() -> Self {
        let op = |op: &'static str| histogram!(REDIS_DURATION, "op" => op);
        Self {
            claim: op("claim"),
            complete: op("complete"),
            release: op("release"),
            extend: op("extend"),
            peek: op("peek"),
            invalidate: op("invalidate"),
        }
    }
}

impl Default for RedisOps {
    fn default() -> Self {
        Self::new()
    }
}

/// Records the time since `started` in `histogram`.
pub fn elapsed(histogram: &Histogram, started: Instant) {
    histogram.record(started.elapsed().as_secs_f64());
}

pub fn postgres_op(op: &'static str, started: Instant) {
    histogram!(POSTGRES_DURATION, "op" => op).record(started.elapsed().as_secs_f64());
}

pub fn fallback(reason: &'static str) {
    counter!(FALLBACK, "reason" => reason).increment(1);
}

pub fn tier_disagreement(kind: &'static str) {
    counter!(TIER_DISAGREEMENTS, "kind" => kind).increment(1);
}

pub fn redis_wait_short() {
    counter!(REDIS_WAIT_SHORT).increment(1);
}

/// Every `reason` of [`UNREADABLE`] (`Unreadable::reason`, and `corrupt`).
pub const UNREADABLE_REASONS: [&str; 6] = [
    "forged",
    "unknown_key",
    "no_keys",
    "unsealed",
    "malformed",
    "corrupt",
];

/// A stored record could not be read: `reason` from `StoreError::unreadable`.
pub fn unreadable(reason: &'static str) {
    counter!(UNREADABLE, "reason" => reason).increment(1);
}

pub fn lease_lost() {
    counter!(LEASE_LOST).increment(1);
}

pub fn queue_depth(depth: usize) {
    gauge!(QUEUE_DEPTH).set(depth as f64);
}

/// Sets the dropped log lines counter (the writer thread counts them).
pub fn log_lines_dropped(total: u64) {
    counter!(LOG_DROPPED).absolute(total);
}

pub fn write_failure() {
    counter!(WRITE_FAILURES).increment(1);
}

/// Why a durable copy was given up, the `reason` of `idemgate_write_through_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The write-through retry queue was full.
    QueueFull,
    /// Postgres refused the record itself, written on its own.
    Refused,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::Refused => "refused",
        }
    }
}

pub fn write_dropped(reason: DropReason) {
    counter!(WRITE_DROPPED, "reason" => reason.as_str()).increment(1);
}

/// One completer pass: `ran`, `skipped` or `failed`.
pub fn completer_pass(result: &'static str) {
    counter!(COMPLETER_PASSES, "result" => result).increment(1);
}

pub fn completer_takeover() {
    counter!(COMPLETER_TAKEOVERS).increment(1);
}

/// One completer attempt's outcome (one of [`COMPLETER_OUTCOME_NAMES`]).
pub fn completer_outcome(outcome: &'static str) {
    counter!(COMPLETER_OUTCOMES, "outcome" => outcome).increment(1);
}

pub fn reaped(n: u64) {
    counter!(REAPED).increment(n);
}

pub fn redis_up(up: bool) {
    gauge!(REDIS_UP).set(if up { 1.0 } else { 0.0 });
}

/// Counts an upstream call under a lease for as long as it lives
/// ([`RouteMetrics::in_flight`]).
pub struct InFlightGuard(Gauge);

impl InFlightGuard {
    fn on(gauge: Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// A server limit that was reached (`server.max_connections` and the like).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A connection arrived while every slot was taken, and waited for one.
    MaxConnections,
    /// A request was answered 503 `overloaded`: too many requests in flight.
    MaxInFlight,
    /// A request was answered 503 `overloaded`: its body did not fit the byte budget.
    BufferBudget,
    /// A connection was closed because its client did not read its response.
    WriteTimeout,
}

impl Limit {
    pub const ALL: [Limit; 4] = [
        Limit::MaxConnections,
        Limit::MaxInFlight,
        Limit::BufferBudget,
        Limit::WriteTimeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::MaxConnections => "max_connections",
            Limit::MaxInFlight => "max_in_flight",
            Limit::BufferBudget => "buffer_budget",
            Limit::WriteTimeout => "write_timeout",
        }
    }

    /// The counter of this limit, to be looked up once and kept.
    pub fn counter(self) -> Counter {
        counter!(LIMITED, "limit" => self.as_str())
    }
}

fn describe_limits() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        LIMITED,
        "Times a server limit was reached, by limit: max_connections (a connection waited \
         for a slot), max_in_flight and buffer_budget (a request got 503 overloaded), \
         write_timeout (a connection was closed because its client did not read)."
    );
    describe_gauge!(
        OPEN_CONNECTIONS,
        "Connections open on the proxy listener (sampled every second)."
    );
    describe_gauge!(
        BUFFERED_BYTES,
        Unit::Bytes,
        "Bytes of buffered bodies charged to server.buffer_budget (sampled every second)."
    );
    for limit in Limit::ALL {
        limit.counter().absolute(0);
    }
}

/// Samples the limits' gauges (kept off the request path).
pub fn limits_sampled(open_connections: usize, buffered_bytes: u64) {
    gauge!(OPEN_CONNECTIONS).set(open_connections as f64);
    gauge!(BUFFERED_BYTES).set(buffered_bytes as f64);
}
