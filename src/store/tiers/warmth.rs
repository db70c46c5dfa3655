//! `lookup_on_miss = "when_cold"`: whether Redis provably holds every record written
//! within the longest `ttl`, so that an acquired Redis claim needs no Postgres lookup.
//!
//! Warmth is per hash slot (so per cluster shard): one marker per slot
//! (`store::redis::slots`), read by the claim script in the record's own slot. A claim is
//! *warm* when all of these hold:
//! - the marker of the record's slot, read in the same atomic step as the claim, is
//!   older than the longest `ttl` and was written by the server process that answers
//!   now (its value is encoded "raw" only in that process: see `lua/claim.lua`). The
//!   script sets the marker when it finds none (a new, restarted or flushed shard) and
//!   renews it when another process wrote it (a replica promoted with replicated
//!   markers, a restart or a restore from RDB/AOF, a resharding), so either is
//!   noticed by the very next claim in that shard, on every replica, while the other
//!   shards stay warm. Standalone and Sentinel use the same 16,384 markers on one primary;
//! - `maxmemory-policy` is `noeviction` (read by the probe; unknown counts as cold);
//! - this replica owes no marker reset for the record's slot. A reset is owed for a
//!   slot whenever Redis may lack a record of that slot that Postgres has: a claim taken
//!   in Postgres while Redis was unavailable (`on_redis_unavailable = "postgres"`), and
//!   a completion Redis refused while Postgres stored it. Only those slots are reset
//!   (one `DEL` each), so a shard outage does not make the healthy shards cold, and a
//!   breaker trip with `reject` or `pass_through` (nothing written elsewhere) resets
//!   nothing. Until a slot's `DEL` lands, this replica counts that slot as cold; once it
//!   lands, every replica does.
//!
//! Limits: another replica learns of a reset only when the `DEL`s reach Redis. A
//! refused completion leaves its lease in Redis for `lock_ttl`, and the reset is retried
//! at once and then by every probe, so the reset lands before that lease can expire
//! unless Redis refuses writes for the whole `lock_ttl`. The breaker is one per shard
//! (see `breaker`): while a shard's is open, its claims follow the fallback, so with
//! `on_redis_unavailable = "postgres"` the slots of every record claimed meanwhile are
//! reset (those records are in Postgres only), and a shard's breaker closes once the
//! markers of its own slots are reset. A write lost in a failover is covered only
//! because the promoted server is another process; a shard that loses writes without
//! changing process (none known in Redis) would not be seen, and neither would an old
//! primary that rejoins by partial resync and is promoted back while a marker it wrote
//! in its first term still stands (no claim in that slot meanwhile).
//!
//! Only claims in Redis with `[postgres]` read the markers (the claim script is given
//! the marker key only then): `when_cold` skips the lookup when warm, and `always` lets
//! a warm claim stand when the lookup fails. With write-through claims Postgres
//! decides, and Redis alone has nothing to look up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::super::redis::cold_slots::{slots_of, Bits, SlotSet};

use super::super::redis::RedisStore;
use crate::config::LookupOnMiss;
use crate::metrics;

#[derive(Debug)]
pub struct Warmth {
    mode: LookupOnMiss,
    longest_ttl: Duration,
    /// `maxmemory-policy` is `noeviction`, as of the last probe (false while unreadable).
    keeps_everything: AtomicBool,
    /// The policy last read was `noeviction` (what a change is reported against).
    last_read: AtomicBool,
    /// The last reading failed (reported once).
    unreadable: AtomicBool,
    /// Slots where Redis may lack a record Postgres has, the marker not yet reset.
    pending: SlotSet,
    /// Slots whose reset is on its way (cold until it lands).
    resetting: SlotSet,
    /// One reset at a time.
    reset_lock: tokio::sync::Mutex<()>,
}

impl Warmth {
    pub fn new(mode: LookupOnMiss, longest_ttl: Duration) -> Self {
        Self {
            mode,
            longest_ttl,
            keeps_everything: AtomicBool::new(false),
            last_read: AtomicBool::new(false),
            unreadable: AtomicBool::new(false),
            pending: SlotSet::default(),
            resetting: SlotSet::default(),
            reset_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether an acquired Redis claim in `slot`, which read the marker at
    /// `marker_age`, must be checked against Postgres.
    pub fn must_lookup(&self, marker_age: Duration, slot: u16) -> bool {
        self.mode == LookupOnMiss::Always || !self.vouches(marker_age, slot)
    }

    /// Whether Redis provably holds every record of `slot` of the last longest `ttl`,
    /// for a claim that read the slot's marker at `marker_age` (whatever the mode). When
    /// it does not, a lookup whose answer is unknown must fail the claim closed.
    pub fn vouches(&self, marker_age: Duration, slot: u16) -> bool {
        self.keeps_everything()
            && !self.pending.contains(slot)
            && !self.resetting.contains(slot)
            && marker_age > self.longest_ttl
    }

    /// Whether the last probe read `maxmemory-policy` as `noeviction` (no claim is warm
    /// before it has).
    pub fn keeps_everything(&self) -> bool {
        self.keeps_everything.load(Ordering::Acquire)
    }

    /// Redis may lack a record of `slot` that Postgres has: count the slot cold here
    /// at once, and everywhere once [`Warmth::reset`] succeeds.
    pub fn set_cold(&self, slot: u16) {
        self.pending.insert(slot);
    }

    /// Deletes the markers of the slots owed a reset; true when none is owed any more.
    pub async fn reset(&self, redis: &RedisStore) -> bool {
        self.reset_within(redis, None).await
    }

    /// [`Warmth::reset`] of the slots within `shard` only (every slot: `None`); true
    /// when none of them is owed a reset any more. A shard's breaker closes on it, so
    /// that another shard still down does not keep it open.
    pub async fn reset_within(&self, redis: &RedisStore, shard: Option<&Bits>) -> bool {
        let _one = self.reset_lock.lock().await;
        let owed = |set: &SlotSet| match shard {
            None => !set.is_empty(),
            Some(bits) => set.intersects(bits),
        };
        if !owed(&self.pending) {
            return !owed(&self.resetting);
        }
        let bits = self.pending.move_into(&self.resetting, shard);
        let slots = slots_of(&bits);
        let done = redis.reset_markers(&slots).await;
        if done.is_err() {
            self.pending.add(&bits);
        }
        self.resetting.remove(&bits);
        match done {
            Ok(()) => {
                tracing::info!(
                    slots = slots.len(),
                    "warmth markers reset: every replica looks keys of these slots up in \
                    postgres until their markers are older than the longest ttl"
                );
                !owed(&self.pending)
            }
            Err(e) => {
                metrics::fallback("marker_reset_failed");
                tracing::warn!(error = %e, "could not reset the warmth markers; retrying at \
                    the next probe (this replica looks keys of those slots up meanwhile)");
                false
            }
        }
    }

    /// The probe's part: re-read the eviction policy, retry an owed reset.
    pub async fn refresh(&self, redis: &RedisStore) {
        self.reset(redis).await;
        let read = redis.maxmemory_policy().await;
        match self.observe(read.as_ref().ok().map(|p| p == "noeviction")) {
            Observed::Changed(keeps) => tracing::info!(
                noeviction = keeps,
                "redis eviction policy changed: lookups on miss are {}",
                if keeps {
                    "decided by the marker"
                } else {
                    "always on"
                }
            ),
            Observed::Unreadable => {
                if let Err(e) = read {
                    tracing::warn!(error = %e, "could not read the redis eviction policy: \
                        lookups on miss are always on until it is read");
                }
            }
            Observed::Same => {}
        }
    }

    /// One reading of the eviction policy (`None`: it could not be read, which counts
    /// as cold but is not a change of policy): what to report. A change is reported
    /// against the last policy read, an unreadable one once until it is read again.
    fn observe(&self, noeviction: Option<bool>) -> Observed {
        let Some(keeps) = noeviction else {
            self.keeps_everything.store(false, Ordering::Release);
            return match self.unreadable.swap(true, Ordering::AcqRel) {
                false => Observed::Unreadable,
                true => Observed::Same,
            };
        };
        self.unreadable.store(false, Ordering::Release);
        self.keeps_everything.store(keeps, Ordering::Release);
        match self.last_read.swap(keeps, Ordering::AcqRel) != keeps {
            true => Observed::Changed(keeps),
            false => Observed::Same,
        }
    }
}

/// What a reading of the eviction policy means for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observed {
    /// The policy read differs from the last one read: `noeviction` or not.
    Changed(bool),
    /// It could not be read (first time since it last was).
    Unreadable,
    /// Nothing to report.
    Same,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_policy_is_cold_but_no_change() {
        let w = Warmth::new(LookupOnMiss::WhenCold, Duration::from_secs(60));
        let day = Duration::from_secs(86_400);
        assert_eq!(w.observe(Some(true)), Observed::Changed(true));
        assert!(w.vouches(day, 7));
        assert_eq!(w.observe(Some(true)), Observed::Same);
        // Unreadable: cold at once, reported once, and not as a change.
        assert_eq!(w.observe(None), Observed::Unreadable);
        assert!(!w.vouches(day, 7), "unknown counts as cold");
        assert_eq!(w.observe(None), Observed::Same);
        // Read again, the same policy: warm again, no change to report.
        assert_eq!(w.observe(Some(true)), Observed::Same);
        assert!(w.vouches(day, 7));
        assert_eq!(w.observe(Some(false)), Observed::Changed(false));
        assert_eq!(w.observe(None), Observed::Unreadable);
        assert_eq!(w.observe(Some(false)), Observed::Same);
    }
}
