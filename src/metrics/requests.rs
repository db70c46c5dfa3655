//! The request path's metrics: keyed requests by route and outcome
//! (`idemgate_requests_total` and their duration), unkeyed requests, every request by
//! the protocol it came in ([`Protocol`]), upstream calls,
//! upstream calls in flight under a lease, the calls that go on after their client was
//! answered ([`detached`], [`Detached`]) and the size of stored responses, each route's
//! handles registered once ([`RouteMetrics`]).

use std::time::Instant;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

pub const REQUESTS: &str = "idemgate_requests_total";
pub const REQUEST_DURATION: &str = "idemgate_request_duration_seconds";
pub const UNKEYED_REQUESTS: &str = "idemgate_unkeyed_requests_total";
pub const REQUESTS_BY_PROTOCOL: &str = "idemgate_requests_by_protocol_total";
pub const UPSTREAM_DURATION: &str = "idemgate_upstream_duration_seconds";
pub const IN_FLIGHT: &str = "idemgate_in_flight";
pub const STORED_BYTES: &str = "idemgate_stored_response_bytes";
pub const DETACHED: &str = "idemgate_upstream_detached";
pub const DETACHED_ENDED: &str = "idemgate_upstream_detached_total";
pub const DETACHED_OVERRUN: &str = "idemgate_upstream_detached_overrun_seconds";

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

/// What a request came in as, for `idemgate_requests_by_protocol_total` and the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Protocol {
    /// HTTP/1.x.
    Http1,
    /// A stream of an HTTP/2 connection, not gRPC.
    Http2,
    /// A gRPC call (HTTP/2 with `Content-Type: application/grpc`).
    Grpc,
}

impl Protocol {
    const ALL: [Protocol; 3] = [Protocol::Http1, Protocol::Http2, Protocol::Grpc];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::Http2 => "http2",
            Protocol::Grpc => "grpc",
        }
    }
}

/// Describes the request path's metrics.
pub(super) fn describe() {
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
    describe_counter!(
        REQUESTS_BY_PROTOCOL,
        "Requests on the proxy listener by route and protocol (http1, http2, grpc), keyed or not."
    );
    describe_histogram!(UPSTREAM_DURATION, Unit::Seconds, "Upstream call duration.");
    describe_gauge!(IN_FLIGHT, "Upstream calls running under a lease.");
    describe_histogram!(STORED_BYTES, Unit::Bytes, "Size of stored responses.");
    describe_gauge!(
        DETACHED,
        "Upstream calls still running after their client was answered 504 at upstream_timeout."
    );
    describe_counter!(
        DETACHED_ENDED,
        "Upstream calls that outlived their client's upstream_timeout, by route and how they \
         ended (stored, released, failed, cancelled at upstream_deadline, lease_lost, not_stored)."
    );
    describe_histogram!(
        DETACHED_OVERRUN,
        Unit::Seconds,
        "How long past upstream_timeout the calls that outlived it took."
    );
}

/// Sets the request path's gauges to their starting values.
pub(super) fn start() {
    gauge!(IN_FLIGHT).set(0.0);
    gauge!(DETACHED).set(0.0);
}

/// How an upstream call that outlived its client's `upstream_timeout` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detached {
    /// Its answer (or a stored problem) is the key's record.
    Stored,
    /// A release status: the key is free.
    Released,
    /// No answer worth storing (a reset after sending, with `on_ambiguous = "release"`).
    Failed,
    /// Cancelled at `upstream_deadline`.
    Cancelled,
    /// Another execution held the key by the time it ended.
    LeaseLost,
    /// Its answer could not be stored.
    NotStored,
}

impl Detached {
    pub fn as_str(self) -> &'static str {
        match self {
            Detached::Stored => "stored",
            Detached::Released => "released",
            Detached::Failed => "failed",
            Detached::Cancelled => "cancelled",
            Detached::LeaseLost => "lease_lost",
            Detached::NotStored => "not_stored",
        }
    }
}

/// A call goes on after its client was answered (`+1`), or such a call ended (`-1`).
pub fn detached(delta: f64) {
    gauge!(DETACHED).increment(delta);
}

/// A call that outlived its client's `upstream_timeout` by `overrun` ended as `how`.
pub fn detached_ended(route: &str, how: Detached, overrun: std::time::Duration) {
    let route = route.to_string();
    counter!(DETACHED_ENDED, "route" => route.clone(), "outcome" => how.as_str()).increment(1);
    histogram!(DETACHED_OVERRUN, "route" => route).record(overrun.as_secs_f64());
}

/// One route's metric handles, registered once at start so that a request records
/// without building label sets or looking anything up.
pub struct RouteMetrics {
    requests: [(Counter, Histogram); 10],
    unkeyed: Counter,
    protocols: [Counter; 3],
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
            protocols: Protocol::ALL.map(|p| {
                counter!(REQUESTS_BY_PROTOCOL, "route" => route.clone(), "protocol" => p.as_str())
            }),
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

    pub fn protocol(&self, protocol: Protocol) {
        self.protocols[protocol as usize].increment(1);
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
pub fn unmatched(started: Instant, protocol: Protocol) {
    let labels = [
        ("route", "_unmatched"),
        ("outcome", Outcome::Rejected.as_str()),
    ];
    counter!(REQUESTS, &labels).increment(1);
    let by_protocol = [("route", "_unmatched"), ("protocol", protocol.as_str())];
    counter!(REQUESTS_BY_PROTOCOL, &by_protocol).increment(1);
    histogram!(REQUEST_DURATION, &labels).record(started.elapsed().as_secs_f64());
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
