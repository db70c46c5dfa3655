//! Waiting duplicates (`in_flight = "wait"`): a duplicate that found its key in flight
//! joins the key's fleet-wide waiters and claims again when the holder completes or
//! releases, or its lease runs out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::lease::Lease;
use super::super::{RedisStore, StoreError};
use super::{Kept, Stores};
use crate::idempotency::{Claim, Fingerprint, RecordId, Scope};
use crate::route::Route;

impl Stores {
    /// A duplicate found the key in flight and may wait (`in_flight = "wait"`): joins the
    /// key's waiters (capped fleet-wide) and re-claims whenever the holder completes or
    /// releases (pub/sub) or its lease runs out, until `wait_timeout`.
    pub async fn wait(
        &self,
        route: &Arc<Route>,
        scope: Scope,
        record: RecordId,
        fingerprint: &Fingerprint,
        remaining: Duration,
        kept: Kept,
    ) -> Result<Claim<Lease>, StoreError> {
        let in_flight = Claim::InFlight { remaining };
        let Some(waiters) = &self.0.waiters else {
            return Ok(in_flight);
        };
        let policy = &route.policy;
        // Leaves the waiters however this ends, a caller hanging up included.
        let Some(_slot) = self.join_waiters(route, record).await else {
            return Ok(in_flight);
        };
        let watch = waiters.watch(self.0.redis.channel(&_slot.key)).await;
        let deadline = Instant::now() + policy.settings.wait_timeout;
        let result = loop {
            let notified = watch.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match (self.claim(route, scope, record, fingerprint, kept.clone())).await {
                Ok(Claim::InFlight { remaining }) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Ok(Claim::InFlight { remaining });
                    }
                    // Woken by the holder, or when its lease runs out, whichever is first;
                    // in a cluster, re-subscribed and re-checked every `RECHECK` too (a
                    // slot that moved lost its subscription: see `waiters`).
                    let nap = (remaining + Duration::from_millis(10)).min(left);
                    let recheck = watch.recheck().filter(|r| *r < nap);
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep(recheck.unwrap_or(nap)) => {
                            if recheck.is_some() {
                                watch.refresh().await;
                            }
                        }
                    }
                }
                other => break other,
            }
        };
        result
    }
}

impl Stores {
    /// Takes a place among `record`'s fleet-wide waiters; `None` when they are full (or
    /// Redis did not answer).
    async fn join_waiters(&self, route: &Route, record: RecordId) -> Option<WaiterSlot> {
        let policy = &route.policy;
        let key = self.0.redis.record_key(record);
        let id = uuid::Uuid::new_v4().simple().to_string();
        match (self.0.redis)
            .join_waiters(
                &key,
                policy.settings.max_waiters,
                &id,
                policy.settings.wait_timeout * 2,
            )
            .await
        {
            Ok(true) => {}
            _ => return None,
        }
        Some(WaiterSlot {
            redis: self.0.redis.clone(),
            key,
            id,
        })
    }
}

/// A place among a record's fleet-wide waiters. Leaving happens on drop, so a waiter
/// whose caller hung up (its request future dropped mid-wait) frees its place at once
/// instead of holding it until the set expires.
struct WaiterSlot {
    redis: RedisStore,
    key: String,
    id: String,
}

impl Drop for WaiterSlot {
    fn drop(&mut self) {
        let (redis, key, id) = (
            self.redis.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = redis.leave_waiters(&key, &id).await {
                    tracing::debug!(error = %e, "could not leave the waiters; the place lapses");
                }
            });
        }
    }
}
