//! `lookup_on_miss = "when_cold"`: whether Redis provably holds every record written
//! within the longest `ttl`, so that an acquired Redis claim needs no Postgres lookup.
//!
//! Redis is *warm* when its marker (set when first seen absent: a new, restarted or
//! flushed Redis) is older than the longest `ttl` and `maxmemory-policy` is
//! `noeviction`. A probe re-checks this every `redis.probe_interval`; anything
//! unknown counts as cold, and so does the time after a Redis outage.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::config::LookupOnMiss;
use crate::store::RedisStore;

#[derive(Debug)]
pub struct Warmth {
    mode: LookupOnMiss,
    warm: AtomicBool,
}

impl Warmth {
    pub fn new(mode: LookupOnMiss) -> Self {
        Self {
            mode,
            warm: AtomicBool::new(false),
        }
    }

    /// Whether an acquired Redis claim must be checked against Postgres.
    pub fn must_lookup(&self) -> bool {
        self.mode == LookupOnMiss::Always || !self.warm.load(Ordering::Acquire)
    }

    pub fn mode(&self) -> LookupOnMiss {
        self.mode
    }

    /// Counts Redis as cold until the next successful probe says otherwise.
    pub fn set_cold(&self) {
        self.warm.store(false, Ordering::Release);
    }

    /// Re-reads the marker and the eviction policy.
    pub async fn refresh(&self, redis: &RedisStore, longest_ttl: Duration) {
        if self.mode == LookupOnMiss::Always {
            return;
        }
        let warm = match (redis.marker_age().await, redis.maxmemory_policy().await) {
            (Ok(age), Ok(policy)) => policy == "noeviction" && age > longest_ttl,
            _ => false,
        };
        let was = self.warm.swap(warm, Ordering::AcqRel);
        if was != warm {
            tracing::info!(
                warm,
                "redis warmth changed: lookups on miss are {}",
                if warm { "skipped" } else { "on" }
            );
        }
    }
}
