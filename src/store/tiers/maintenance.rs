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
    pub async fn probe(&self) {
        if self.0.breaker.is_open() {
            if self.0.warmth.reset(&self.0.redis).await && self.0.redis.probe_writes().await.is_ok()
            {
                self.0.breaker.close();
                metrics::redis_up(true);
                tracing::info!("redis takes writes again: claims are back in redis");
            }
            return;
        }
        self.0.warmth.refresh(&self.0.redis).await;
    }
}
