//! The Rust side of `lua/complete.lua`: storing a response under the lease, with
//! `WAIT` for replicas where `redis.replica_acks` asks for it ([`super::replicas`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::Value;

use super::{channel, millis, scripts, RedisStore};
use crate::idempotency::{Completion, Fingerprint};
use crate::metrics;
use crate::store::StoreError;

impl RedisStore {
    /// Runs `lua/complete.lua`.
    ///
    /// KEYS: `[record key]`. ARGV: `[lock token, encoded response, ttl ms, fingerprint,
    /// completion channel, "PUBLISH" or "SPUBLISH", record layout ("string" or "hash",
    /// `redis.record_format`)]`.
    /// Reply: `1` stored (or already stored by this token, or the record had expired
    /// unclaimed), `0` another token holds the record: nothing was written. Publishes on
    /// the channel only if a claim answered "in flight" for the record (or it had expired).
    pub async fn complete(
        &self,
        key: &str,
        token: &str,
        encoded: Bytes,
        ttl: Duration,
        fingerprint: &Fingerprint,
    ) -> Result<Completion, StoreError> {
        let args = || -> Vec<Value> {
            vec![
                token.into(),
                encoded.clone().into(),
                millis(ttl).into(),
                Bytes::copy_from_slice(fingerprint.as_bytes()).into(),
                channel(key).into(),
                self.inner.publish.into(),
                self.inner.record_format.into(),
            ]
        };
        let started = Instant::now();
        let reply: i64 = match self
            .inner
            .replica_wait
            .as_ref()
            .filter(|w| w.for_completions())
        {
            None => {
                let client = self.inner.lanes.for_key(key);
                scripts::eval(&self.inner.complete, client, || (key, args())).await?
            }
            Some(w) => {
                let slot = super::slots::slot(key);
                if w.waits(slot) {
                    let shard = || {
                        let shard = self.shard_of(slot);
                        (shard.name, shard.slots)
                    };
                    (w.complete(&self.inner.complete, key, args(), shard).await?).convert()?
                } else {
                    // Its shard's replicas are not acknowledging (`replicas`): no WAIT.
                    metrics::redis_wait_short();
                    let client = self.inner.lanes.for_slot(slot);
                    scripts::eval(&self.inner.complete, client, || (key, args())).await?
                }
            }
        };
        metrics::elapsed(&self.inner.ops.complete, started);
        Ok(match reply {
            1 => Completion::Stored,
            _ => Completion::LeaseLost,
        })
    }

    /// Whether completions wait for replicas (`redis.replica_acks` > 0).
    pub fn waits_for_replicas(&self) -> bool {
        (self.inner.replica_wait.as_ref()).is_some_and(|w| w.for_completions())
    }

    /// `redis.replica_acks`: for every shard whose completions skip `WAIT` because its
    /// replicas stopped acknowledging, checks whether they acknowledge a write again
    /// (then its completions wait for them again). Shards are checked together; each
    /// check takes up to `redis.replica_ack_timeout`. Nothing to do without
    /// `replica_acks`.
    pub async fn recheck_replicas(&self) {
        let Some(unacked) = (self.inner.replica_wait.as_ref()).map(|w| w.unacked()) else {
            return;
        };
        if unacked.iter().all(|w| *w == 0) {
            return;
        }
        let shards = (self.shards().into_iter())
            .filter(|s| s.slots.iter().zip(&unacked).any(|(s, u)| s & u != 0));
        let mut checks = tokio::task::JoinSet::new();
        for shard in shards {
            let store = self.clone();
            checks.spawn(async move {
                let Some(wait) = &store.inner.replica_wait else {
                    return;
                };
                let key = store.probe_key(shard.probe_slot);
                if wait
                    .acknowledged(shard.probe_slot, &key, &shard.slots)
                    .await
                {
                    tracing::info!(shard = %shard.name, "the replicas acknowledge writes \
                        again: completions of this shard wait for them again");
                }
            });
        }
        checks.join_all().await;
    }
}
