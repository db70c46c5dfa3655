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

/// Describes the limits' metrics.
pub(super) fn describe() {
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
