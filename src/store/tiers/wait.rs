//! Waiting duplicates (`in_flight = "wait"`): a duplicate that found its key in flight
//! joins the key's fleet-wide waiters and claims again when the holder completes or
//! releases, or its lease runs out. A key whose answer streams live is joined instead
//! ([`Waited::Joined`]): the duplicate reads the stream as it is written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::super::lease::Lease;
use super::super::redis::waiters::RECHECK;
use super::super::{RedisStore, StoreError};
use super::live::LiveReader;
use super::{Resendable, Stores};
use crate::idempotency::{Binding, Claim, Fingerprint, RecordId, Scope};
use crate::route::Route;

/// What a wait came to.
pub enum Waited {
    /// A claim as [`Stores::claim`] answers it (the holder completed, released, or is
    /// still in flight at `wait_timeout`).
    Claim(Claim<Lease>),
    /// The holder's answer streams live: join it.
    Joined(Joined),
}

/// A duplicate joining a live answer: its head (a stored response's encoding without a
/// body), the reader of the rest, and its place among the key's waiters, held until
/// the joiner's answer ends.
pub struct Joined {
    pub head: Bytes,
    pub reader: LiveReader,
    slot: WaiterSlot,
}

impl Joined {
    /// When the joiner is to renew its place among the waiters ([`Joined::renew`]):
    /// half the time a place lasts after it was taken or last renewed (at least a
    /// [`RECHECK`] apart).
    pub fn renew_at(&self) -> Instant {
        self.slot.since + (self.slot.lifetime / 2).max(RECHECK)
    }

    /// Renews the joiner's place among the key's waiters, so that it counts against
    /// `max_waiters` as long as it is attached (a place lapses after twice
    /// `wait_timeout`, for a replica that died without leaving).
    pub async fn renew(&mut self) {
        let slot = &mut self.slot;
        slot.since = Instant::now();
        let renewed = (slot.redis).join_waiters(&slot.key, slot.max, &slot.id, slot.lifetime);
        if !matches!(renewed.await, Ok(true)) {
            tracing::debug!("could not renew a joiner's place among the waiters");
        }
    }
}

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
        resend: Resendable,
    ) -> Result<Waited, StoreError> {
        let in_flight = Waited::Claim(Claim::InFlight { remaining });
        let Some(waiters) = &self.0.waiters else {
            return Ok(in_flight);
        };
        let policy = &route.policy;
        // Leaves the waiters however this ends, a caller hanging up included.
        let Some(slot) = self.join_waiters(route, record).await else {
            return Ok(in_flight);
        };
        let watch = waiters.watch(self.0.redis.channel(&slot.key)).await;
        let at = Binding { scope, record };
        let mut asked = false;
        let deadline = Instant::now() + policy.settings.wait_timeout;
        let result = loop {
            let notified = watch.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match (self.claim(route, scope, record, fingerprint, resend.clone())).await {
                Ok(Claim::InFlight { remaining }) => {
                    if let Some((head, reader)) = self.live_reader(&slot.key, at).await? {
                        return Ok(Waited::Joined(Joined { head, reader, slot }));
                    }
                    if !asked {
                        // The holder starts its stream when asked (if its answer streams).
                        asked = true;
                        if let Err(e) = self.0.redis.live_ask(&slot.key).await {
                            tracing::debug!(error = %e, "could not ask to join a live answer");
                        }
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Ok(Claim::InFlight { remaining });
                    }
                    // Woken by the holder, or when its lease runs out, or at the next
                    // re-check, whichever is first. The re-check (every `RECHECK`) is
                    // how a waiter hears of a wake-up missed under load, of a holder
                    // filling Redis on replay (it publishes nothing when it completes,
                    // and with write-through or vouched claims any replica may), and, in a cluster,
                    // of a slot that moved: a nap that heard nothing re-subscribes first
                    // (`Watch::refresh`, a no-op elsewhere; see `waiters`).
                    let nap = (remaining + Duration::from_millis(10))
                        .min(left)
                        .min(RECHECK);
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep(nap) => watch.refresh().await,
                    }
                }
                other => break other,
            }
        };
        result.map(Waited::Claim)
    }
}

impl Stores {
    /// Takes a place among `record`'s fleet-wide waiters; `None` when they are full (or
    /// Redis did not answer).
    async fn join_waiters(&self, route: &Route, record: RecordId) -> Option<WaiterSlot> {
        let policy = &route.policy;
        let key = self.0.redis.record_key(record);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (max, lifetime) = (
            policy.settings.max_waiters,
            policy.settings.wait_timeout * 2,
        );
        let since = Instant::now();
        match (self.0.redis).join_waiters(&key, max, &id, lifetime).await {
            Ok(true) => {}
            _ => return None,
        }
        Some(WaiterSlot {
            redis: self.0.redis.clone(),
            key,
            id,
            max,
            lifetime,
            since,
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
    /// The route's `max_waiters`, and how long the place lasts unless renewed.
    max: u32,
    lifetime: Duration,
    /// When the place was taken, or last renewed.
    since: Instant,
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
