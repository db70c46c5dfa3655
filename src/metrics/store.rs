//! The stores' metrics: Redis and Postgres operation durations, Redis's breaker
//! (`idemgate_redis_up`), its `WAIT` falling short, requests served through a fallback
//! path, completions refused for a lost lease, tiers disagreeing, and stored records
//! that could not be read, and which Postgres server is written to (`idemgate_postgres_up`,
//! the primary, failovers followed).

use std::time::Instant;

use metrics::{counter, gauge, histogram, Histogram};

pub const REDIS_DURATION: &str = "idemgate_redis_duration_seconds";
pub const POSTGRES_DURATION: &str = "idemgate_postgres_duration_seconds";
pub const FALLBACK: &str = "idemgate_fallback_total";
pub const LEASE_LOST: &str = "idemgate_lease_lost_total";
pub const LAPSED_TAKEOVERS: &str = "idemgate_lapsed_takeovers_total";
pub const REDIS_WAIT_SHORT: &str = "idemgate_redis_wait_short_total";
pub const CLAIM_VOUCH: &str = "idemgate_claim_vouch_total";
pub const LEASES_WRITTEN_BACK: &str = "idemgate_leases_written_back_total";
pub const REDIS_UP: &str = "idemgate_redis_up";
pub const TIER_DISAGREEMENTS: &str = "idemgate_tier_disagreements_total";
pub const UNREADABLE: &str = "idemgate_stored_records_unreadable_total";
pub const POSTGRES_UP: &str = "idemgate_postgres_up";
pub const POSTGRES_PRIMARY: &str = "idemgate_postgres_primary_info";
pub const POSTGRES_FAILOVERS: &str = "idemgate_postgres_failovers_total";

/// Describes the stores' metrics.
pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
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
    describe_counter!(
        LAPSED_TAKEOVERS,
        "Client claims that took over a lease which lapsed with no completion, by what they did."
    );
    describe_counter!(
        REDIS_WAIT_SHORT,
        "Completions that fewer replicas than redis.replica_acks acknowledged in time."
    );
    describe_counter!(
        CLAIM_VOUCH,
        "Claims acquired in Redis with claims = \"vouched\", by verdict: kept (Redis alone), \
         no_fsync, unmarked, completer, wait_short or rerouted (a Postgres row too), young \
         (its slot lost its data lately), young_unkept (a loss before any claim was kept \
         alone: no quarantine)."
    );
    describe_counter!(
        LEASES_WRITTEN_BACK,
        "Leases a holder's heartbeat wrote back into a Redis that had lost them."
    );
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
    describe_gauge!(
        POSTGRES_UP,
        "1 while the last Postgres statement reached a writable server, 0 after one failed for lack of one."
    );
    describe_gauge!(
        POSTGRES_PRIMARY,
        "1 for the Postgres server (host:port) new connections write to; 0 for the one before."
    );
    describe_counter!(
        POSTGRES_FAILOVERS,
        "New Postgres connections that reached a different writable server than the one before."
    );
}

/// Registers the stores' counters at zero (so that the first increment shows in
/// `increase()`) and sets `idemgate_redis_up`.
pub(super) fn start() {
    for name in [LEASE_LOST, REDIS_WAIT_SHORT, POSTGRES_FAILOVERS] {
        counter!(name).absolute(0);
    }
    for reason in UNREADABLE_REASONS {
        counter!(UNREADABLE, "reason" => reason).absolute(0);
    }
    for then in ["stored_unknown", "ran_again"] {
        counter!(LAPSED_TAKEOVERS, "then" => then).absolute(0);
    }
    gauge!(REDIS_UP).set(1.0);
}

/// `idemgate_redis_duration_seconds` of each Redis store operation, registered once (by
/// the Redis store, after [`install`](super::install)) so that a call does not look them up.
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

/// A vouched claim's verdict (see [`CLAIM_VOUCH`]).
pub fn claim_vouch(verdict: &'static str) {
    counter!(CLAIM_VOUCH, "verdict" => verdict).increment(1);
}

pub fn lease_written_back() {
    counter!(LEASES_WRITTEN_BACK).increment(1);
}

pub fn lease_lost() {
    counter!(LEASE_LOST).increment(1);
}

/// A client's claim took over a lapsed lease: `then` is `stored_unknown` (settled as an
/// unknown outcome) or `ran_again` (`on_ambiguous = "release"`, or the completer's route).
pub fn lapsed_takeover(then: &'static str) {
    counter!(LAPSED_TAKEOVERS, "then" => then).increment(1);
}

/// `idemgate_postgres_up` (a handle, set on every statement's outcome).
pub fn postgres_up() -> metrics::Gauge {
    gauge!(POSTGRES_UP)
}

/// New connections reach `now` instead of `before`: `idemgate_postgres_primary_info`
/// moves to `now`, and, when there was a `before`, `idemgate_postgres_failovers_total`
/// counts one.
pub fn postgres_primary(before: Option<&str>, now: &str) {
    if let Some(before) = before {
        gauge!(POSTGRES_PRIMARY, "host" => before.to_string()).set(0.0);
        counter!(POSTGRES_FAILOVERS).increment(1);
    }
    gauge!(POSTGRES_PRIMARY, "host" => now.to_string()).set(1.0);
}

pub fn redis_up(up: bool) {
    gauge!(REDIS_UP).set(if up { 1.0 } else { 0.0 });
}
