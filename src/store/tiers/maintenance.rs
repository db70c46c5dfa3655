//! Maintenance: the Redis probe (closes the breaker, keeps warmth current) and the
//! Postgres reaper, as background tasks.

use std::time::Duration;

use super::Stores;
use crate::metrics;

impl Stores {
    /// Spawns the Redis probe (breaker and warmth) and, with Postgres, the reaper.
    pub fn spawn_background(&self, probe_interval: Duration, reap: Option<(Duration, usize)>) {
        let stores = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(probe_interval).await;
                stores.probe().await;
            }
        });
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

    /// One probe: close the breaker when Redis takes a write again; refresh warmth.
    ///
    /// The breaker closes once the warmth markers owed a reset (the slots of records
    /// claimed in Postgres during the outage) are reset and every primary takes a write
    /// (`probe_writes`). A Redis that answers PING but refuses writes (a demoted
    /// primary, READONLY) keeps the breaker open, and the breaker never closes with a
    /// marker still claiming Redis holds every record of its slot.
    ///
    /// In sentinel mode the probe first asks the sentinels ([`Self::follow_sentinels`]):
    /// claims stay out of Redis while the pool is not connected to the primary a
    /// majority of them names.
    pub async fn probe(&self) {
        let confirmed = self.follow_sentinels().await;
        if self.0.breaker.is_open() {
            if confirmed
                && self.0.warmth.reset(&self.0.redis).await
                && self.0.redis.probe_writes().await.is_ok()
            {
                self.0.breaker.close();
                metrics::redis_up(true);
                tracing::info!("redis takes writes again: claims are back in redis");
            }
            return;
        }
        self.0.warmth.refresh(&self.0.redis).await;
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
        if self.0.breaker.trip() {
            metrics::redis_up(false);
            tracing::error!(
                reason = why,
                "redis primary not confirmed: claims follow \
                on_redis_unavailable until a majority of the sentinels names it"
            );
        }
        false
    }
}
