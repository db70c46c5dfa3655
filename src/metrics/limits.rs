//! The server limits' metrics: each limit reached ([`Limit`]), open connections and
//! buffered bytes (sampled).

use metrics::{counter, gauge, Counter};

pub const LIMITED: &str = "idemgate_limited_total";
pub const OPEN_CONNECTIONS: &str = "idemgate_open_connections";
pub const BUFFERED_BYTES: &str = "idemgate_buffered_bytes";

/// A server limit that was reached (`server.max_connections` and the like).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A connection arrived while every slot was taken, and waited for one.
    MaxConnections,
    /// A request was answered 503 `overloaded`: too many requests in flight
    /// (`server.max_concurrent_requests`).
    MaxConcurrentRequests,
    /// A request was answered 503 `overloaded`: its body did not fit the byte budget.
    BufferBudget,
    /// A connection was closed because its client did not read its response.
    WriteTimeout,
    /// A request was answered 503 `overloaded`: its connection held its share of
    /// `server.max_concurrent_requests` (`server.connection_share`).
    ConnectionInFlight,
    /// A request was answered 503 `overloaded`: its connection held its share of
    /// `server.buffer_budget` (`server.connection_share`).
    ConnectionBudget,
    /// An HTTP/2 answer whose client took none of it for `server.write_timeout`: its
    /// unsent bytes were freed and its connection told to go away.
    StreamWriteTimeout,
    /// A connection was closed after `server.idle_timeout` with nothing open on it.
    IdleTimeout,
    /// An HTTP/2 connection whose client reset more accepted streams than
    /// `server.http2_max_reset_streams` was told to go away.
    Http2ResetStreams,
}

impl Limit {
    pub const ALL: [Limit; 9] = [
        Limit::MaxConnections,
        Limit::MaxConcurrentRequests,
        Limit::BufferBudget,
        Limit::WriteTimeout,
        Limit::ConnectionInFlight,
        Limit::ConnectionBudget,
        Limit::StreamWriteTimeout,
        Limit::IdleTimeout,
        Limit::Http2ResetStreams,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::MaxConnections => "max_connections",
            // `server.max_concurrent_requests` was `server.max_in_flight` until 0.5.0; the
            // label keeps the old name until the next major release (a minor release
            // renames no metric name or label value: docs/operations.md, Version policy).
            Limit::MaxConcurrentRequests => "max_in_flight",
            Limit::BufferBudget => "buffer_budget",
            Limit::WriteTimeout => "write_timeout",
            Limit::ConnectionInFlight => "connection_in_flight",
            Limit::ConnectionBudget => "connection_budget",
            Limit::StreamWriteTimeout => "stream_write_timeout",
            Limit::IdleTimeout => "idle_timeout",
            Limit::Http2ResetStreams => "http2_reset_streams",
        }
    }

    /// The counter of this limit, to be looked up once and kept.
    pub fn counter(self) -> Counter {
        counter!(LIMITED, "limit" => self.as_str())
    }
}

/// Describes the limits' metrics.
pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        LIMITED,
        "Times a server limit was reached, by limit: max_connections (a connection waited \
         for a slot), max_in_flight (server.max_concurrent_requests) and buffer_budget (a \
         request got 503 overloaded), connection_in_flight and connection_budget (the \
         same, at its connection's share), \
         write_timeout (a connection was closed because its client did not read), \
         stream_write_timeout (an HTTP/2 answer's client took none of it: its bytes were \
         freed, its connection told to go away), idle_timeout (an idle connection was \
         closed), http2_reset_streams (a connection reset too many accepted streams)."
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
}

/// Registers each limit's counter at zero (so that the first increment shows in
/// `increase()`).
pub(super) fn start() {
    for limit in Limit::ALL {
        limit.counter().absolute(0);
    }
}

/// Samples the limits' gauges (kept off the request path).
pub fn limits_sampled(open_connections: usize, buffered_bytes: u64) {
    gauge!(OPEN_CONNECTIONS).set(open_connections as f64);
    gauge!(BUFFERED_BYTES).set(buffered_bytes as f64);
}
