//! The write-through's metrics: completed records waiting for Postgres, failed
//! statements, durable copies given up ([`DropReason`]), and expired records reaped.

use metrics::{counter, gauge};

pub const QUEUE_DEPTH: &str = "idemgate_write_through_queue_depth";
pub const WRITE_FAILURES: &str = "idemgate_write_through_failures_total";
pub const WRITE_DROPPED: &str = "idemgate_write_through_dropped_total";
pub const REAPED: &str = "idemgate_reaped_total";

/// Describes the write-through's metrics.
pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(QUEUE_DEPTH, "Completed records waiting for Postgres.");
    describe_counter!(WRITE_FAILURES, "Failed write-through statements.");
    describe_counter!(
        WRITE_DROPPED,
        "Durable copies given up, by reason: queue_full (the retry queue was full), \
         refused (Postgres refused the record)."
    );
    describe_counter!(REAPED, "Expired records deleted from Postgres.");
}

/// Registers the write-through's counters at zero (so that the first increment shows
/// in `increase()`) and its queue depth at 0.
pub(super) fn start() {
    for name in [WRITE_FAILURES, REAPED] {
        counter!(name).absolute(0);
    }
    for reason in [DropReason::QueueFull, DropReason::Refused] {
        counter!(WRITE_DROPPED, "reason" => reason.as_str()).absolute(0);
    }
    gauge!(QUEUE_DEPTH).set(0.0);
}

pub fn queue_depth(depth: usize) {
    gauge!(QUEUE_DEPTH).set(depth as f64);
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

pub fn reaped(n: u64) {
    counter!(REAPED).increment(n);
}
