//! `lookup_on_miss = "when_cold"`: whether Redis provably holds every record written
//! within the longest `ttl`, so that an acquired Redis claim needs no Postgres lookup.
//!
//! Warmth is per hash slot (so per cluster shard): one marker per slot
//! ([`super::slots`]), read by the claim script in the record's own slot. A claim is
//! *warm* when all of these hold:
//! - the marker of the record's slot, read in the same atomic step as the claim, is
//!   older than the longest `ttl` and was written by the server process that answers
//!   now (its `run_id`). The script sets the marker when it finds none (a new,
//!   restarted or flushed shard) and renews it when another process wrote it (a
//!   replica promoted with replicated markers, a restore from RDB/AOF), so either is
//!   noticed by the very next claim in that shard, on every replica, while the other
//!   shards stay warm. Standalone and Sentinel use the same 16,384 markers on one primary;
//! - `maxmemory-policy` is `noeviction` (read by the probe; unknown counts as cold);
//! - this replica has no marker reset pending. A reset is owed whenever Redis may lack
//!   a record Postgres has: after a Redis outage (claims went to Postgres), and after a
//!   completion Redis refused while Postgres stored it. Until the `DEL` of every
//!   slot's marker lands, this replica counts Redis as cold; once it lands, every
//!   replica does.
//!
//! Limits: another replica learns of a reset only when the `DEL`s reach Redis. A
//! refused completion leaves its lease in Redis for `lock_ttl`, and the reset is retried
//! at once and then by every probe, so the reset lands before that lease can expire
//! unless Redis refuses writes for the whole `lock_ttl`. The breaker is one per replica,
//! not per shard: an outage it sees (one shard down) resets every slot's marker, so
//! every shard is cold for the longest `ttl` (safe, slower). A write lost in a failover
//! is covered only because the promoted server has another `run_id`; a shard that
//! loses writes without changing process (none known in Redis) would not be seen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::config::LookupOnMiss;
use crate::metrics;
use crate::store::RedisStore;

#[derive(Debug)]
pub struct Warmth {
    mode: LookupOnMiss,
    longest_ttl: Duration,
    /// `maxmemory-policy` is `noeviction`, as of the last probe.
    keeps_everything: AtomicBool,
    /// Redis may lack a record Postgres has, and the marker is not yet reset.
    reset_pending: AtomicBool,
}

impl Warmth {
    pub fn new(mode: LookupOnMiss, longest_ttl: Duration) -> Self {
        Self {
            mode,
            longest_ttl,
            keeps_everything: AtomicBool::new(false),
            reset_pending: AtomicBool::new(false),
        }
    }

    /// Whether an acquired Redis claim, which read the marker at `marker_age`, must be
    /// checked against Postgres.
    pub fn must_lookup(&self, marker_age: Duration) -> bool {
        self.mode == LookupOnMiss::Always || !self.vouches(marker_age)
    }

    /// Whether Redis provably holds every record of the last longest `ttl`, for a claim
    /// that read the marker at `marker_age` (whatever the mode). When it does not, a
    /// lookup whose answer is unknown must fail the claim closed.
    pub fn vouches(&self, marker_age: Duration) -> bool {
        self.keeps_everything.load(Ordering::Acquire)
            && !self.reset_pending.load(Ordering::Acquire)
            && marker_age > self.longest_ttl
    }

    pub fn mode(&self) -> LookupOnMiss {
        self.mode
    }

    /// Redis may lack a record that Postgres has: count it cold here at once, and
    /// everywhere once [`Warmth::reset`] succeeds.
    pub fn set_cold(&self) {
        self.reset_pending.store(true, Ordering::Release);
    }

    /// Whether a marker reset is still owed.
    pub fn reset_pending(&self) -> bool {
        self.reset_pending.load(Ordering::Acquire)
    }

    /// Deletes the marker if a reset is owed; true when none is owed any more.
    pub async fn reset(&self, redis: &RedisStore) -> bool {
        if !self.reset_pending() {
            return true;
        }
        match redis.reset_marker().await {
            Ok(()) => {
                self.reset_pending.store(false, Ordering::Release);
                tracing::info!(
                    "warmth marker reset: every replica looks keys up in postgres \
                    until it is older than the longest ttl"
                );
                true
            }
            Err(e) => {
                metrics::fallback("marker_reset_failed");
                tracing::warn!(error = %e, "could not reset the warmth marker; retrying at \
                    the next probe (this replica looks keys up meanwhile)");
                false
            }
        }
    }

    /// The probe's part: re-read the eviction policy, retry an owed reset.
    pub async fn refresh(&self, redis: &RedisStore) {
        self.reset(redis).await;
        let keeps = matches!(redis.maxmemory_policy().await, Ok(p) if p == "noeviction");
        if self.keeps_everything.swap(keeps, Ordering::AcqRel) != keeps {
            tracing::info!(
                noeviction = keeps,
                "redis eviction policy changed: lookups on miss are {}",
                if keeps {
                    "decided by the marker"
                } else {
                    "always on"
                }
            );
        }
    }
}
