//! Maintenance: the Redis breakers (tripped per shard, closed by the probe), the probe
//! (which also keeps warmth current), the recheck of replicas that stopped acknowledging
//! `WAIT`, the replay cache's reset when this replica's view of Redis changes, and the
//! Postgres reaper, as background tasks.

use std::time::Duration;

use super::super::redis::Shard;
use super::super::StoreError;
use super::Stores;
use crate::metrics;

impl Stores {
    /// Spawns the Redis probe (breakers and warmth), with `redis.replica_acks` the
    /// check of replicas that stopped acknowledging, the replay cache's reset on
    /// topology changes and, with Postgres, the reaper.
    pub fn spawn_background(&self, probe_interval: Duration, reap: Option<(Duration, usize)>) {
        let stores = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(probe_interval).await;
                stores.probe().await;
            }
        });
        if self.0.redis.waits_for_replicas() || self.0.redis.vouches() {
            // Apart from the probe: each check may take `redis.replica_ack_timeout`.
            let stores = self.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(probe_interval).await;
                    stores.0.redis.recheck_replicas().await;
                }
            });
        }
        if self.0.cache.is_some() {
            let stores = self.clone();
            (self.0.redis).on_topology_change(move |what| stores.forget_replays(what));
        }
        if self.0.redis.vouches() {
            // Another server may answer now: nothing it runs is assumed until read.
            self.0.redis.forget_vouching_on_changes();
        }
        if let (Some((every, batch)), Some(_)) = (reap, &self.0.postgres) {
            let stores = self.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if let Some(pg) = &stores.0.postgres {
                        match pg.store.reap(batch).await {
                            Ok(Some(n)) if n > 0 => {
                                tracing::info!(deleted = n, "reaped expired records")
                            }
                            Ok(_) => {}
                            Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
                        }
                    }
                }
            });
        }
    }

    /// A claim in `slot` met a lost connection: open the breaker of the shard serving
    /// that slot (every slot outside a cluster), so its claims follow the fallback
    /// while the other shards' claims still go to Redis.
    pub(super) fn trip(&self, slot: u16, e: &StoreError) {
        let shard = self.0.redis.shard_of(slot);
        if self.0.breaker.trip(&shard.slots) {
            metrics::redis_up(false);
            self.forget_replays("breaker opened");
            tracing::error!(error = %e, shard = %shard.name, "redis failing: claims of this \
                shard follow on_redis_unavailable until it answers again");
        }
    }

    /// A claim in `slot` timed out on a live connection: if its shard has answered
    /// nothing for `silent_after`, it is treated as lost (see `breaker`).
    pub(super) fn timed_out(&self, slot: u16, e: &StoreError) {
        let shard = self.0.redis.shard_of(slot);
        if self
            .0
            .breaker
            .timed_out(&shard.name, &shard.slots, self.0.silent_after)
        {
            self.trip(slot, e);
        }
    }

    /// The replay cache starts over: what this replica cached may no longer be what the
    /// Redis tier holds (a failover, a shard that was away), and a replica must not keep
    /// answering with a response its tier has replaced. Replays then come from Redis
    /// (one round trip) and fill the cache again.
    pub(super) fn forget_replays(&self, why: &'static str) {
        if let Some(cache) = &self.0.cache {
            cache.clear();
            tracing::debug!(
                why,
                "replay cache cleared: this replica's view of redis changed"
            );
        }
    }

    /// One probe: close the breaker of every shard that takes a write again; refresh
    /// warmth while every breaker is closed.
    ///
    /// A shard's breaker closes once the warmth markers of its slots owed a reset (the
    /// slots of records claimed in Postgres during the outage) are reset and it takes a
    /// write (one `DEL` in one of its slots). A Redis that answers PING but refuses
    /// writes (a demoted primary, READONLY) keeps the breaker open, and a breaker never
    /// closes with a marker still claiming Redis holds every record of its slot. Shards
    /// are probed together, each on its own: one still away keeps no other open.
    ///
    /// In sentinel mode the probe first asks the sentinels ([`Self::follow_sentinels`]):
    /// claims stay out of Redis while the pool is not connected to the primary a
    /// majority of them names.
    pub async fn probe(&self) {
        let confirmed = self.follow_sentinels().await;
        // Vouched claims: what each primary runs now (AOF, replicas), and the epoch
        // markers if start-up could not write them.
        self.0.redis.probe_vouching().await;
        self.write_epochs(self.0.silent_after).await;
        if !self.0.breaker.any_open() {
            self.0.warmth.refresh(&self.0.redis).await;
            return;
        }
        if !confirmed {
            return;
        }
        let open = self.0.breaker.open_slots();
        let shards = (self.0.redis.shards().into_iter())
            .filter(|s| s.slots.iter().zip(&open).any(|(s, o)| s & o != 0));
        let mut probes = tokio::task::JoinSet::new();
        for shard in shards {
            let stores = self.clone();
            probes.spawn(async move { stores.probe_shard(shard).await });
        }
        probes.join_all().await;
        if !self.0.breaker.any_open() {
            metrics::redis_up(true);
        }
    }

    async fn probe_shard(&self, shard: Shard) {
        let redis = &self.0.redis;
        if self.0.warmth.reset_within(redis, Some(&shard.slots)).await
            && redis.probe_write(shard.probe_slot).await.is_ok()
            && self.0.breaker.close(&shard.slots)
        {
            self.forget_replays("breaker closed");
            tracing::info!(shard = %shard.name, "redis takes writes again: claims of this \
                shard are back in redis");
        }
    }

    /// Sentinel mode: whether the pool is connected to the primary a majority of the
    /// configured sentinels names. When it is connected elsewhere it is reconnected;
    /// until it points there (or while no majority names any primary) the breaker is
    /// open. Always true in the other modes.
    async fn follow_sentinels(&self) -> bool {
        let Some(watch) = &self.0.sentinels else {
            return true;
        };
        let why = match watch.majority().await {
            Some(primary) if self.0.redis.connected_to(&primary) => return true,
            Some(primary) => {
                tracing::info!(
                    primary = %format!("{}:{}", primary.0, primary.1),
                    "the sentinels name another primary: reconnecting"
                );
                self.0.redis.reconnect(watch.reconnect_within).await;
                if self.0.redis.connected_to(&primary) {
                    return true;
                }
                "the sentinels name a primary this replica is not connected to"
            }
            None => "no majority of the sentinels names a primary (cut off from them?)",
        };
        let every_slot = self.0.redis.shard_of(0);
        if self.0.breaker.trip(&every_slot.slots) {
            metrics::redis_up(false);
            self.forget_replays("primary not confirmed");
            tracing::error!(
                reason = why,
                "redis primary not confirmed: claims follow \
                on_redis_unavailable until a majority of the sentinels names it"
            );
        }
        false
    }
}
