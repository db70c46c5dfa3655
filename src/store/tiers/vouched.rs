//! Vouched claims (`postgres.claims = "vouched"`) where Redis cannot vouch for a
//! claim and Postgres does not know the leases Redis kept: a slot that lost its data
//! waits out its quarantine, and a Redis that cannot be reached leaves Postgres to
//! answer only what it holds.

use std::time::Duration;

use super::super::lease::Lease;
use super::super::postgres::RecordRef;
use super::super::StoreError;
use super::arbitrate::Ask;
use super::{Durable, Stores};
use crate::idempotency::{Binding, Claim};
use crate::metrics;
use crate::route::Route;

impl Stores {
    /// Vouched claims: writes the epoch marker of every slot once per deployment (a
    /// key prefix Postgres has not seen), so that a new Redis is not taken for one that
    /// lost its data. Tried for at most `within` at start-up; until it is done, a slot
    /// first claimed meanwhile waits out its quarantine once.
    pub async fn write_epochs(&self, within: Duration) {
        let (Some(pg), Some(_)) = (&self.0.postgres, self.0.redis.vouch_quarantine()) else {
            return;
        };
        let prefix = self.0.redis.prefix();
        let write = async {
            if !pg.store.epochs_written(prefix).await? {
                self.0.redis.write_epoch_markers().await?;
                pg.store.mark_epochs_written(prefix).await?;
                tracing::info!("redis epoch markers written: a new deployment of vouched claims");
            }
            Ok::<(), StoreError>(())
        };
        match tokio::time::timeout(within, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the redis epoch markers \
                yet: slots first claimed meanwhile wait out their quarantine once"),
            Err(_) => tracing::warn!(
                "the redis epoch markers took too long to write: slots \
                first claimed meanwhile wait out their quarantine once"
            ),
        }
    }

    /// A vouched claim acquired in a slot whose epoch marker is `age` old, younger than
    /// the quarantine: Redis lost that slot's data lately (or never had it), and a holder
    /// of a lease it lost may still run its call. Releases this claim, so that such a
    /// holder's heartbeat can write its lease back (`lua/extend.lua`), waits out the
    /// rest of the quarantine, and claims again: the new claim meets the written-back
    /// lease (in flight), the holder's stored answer, or nothing, and then holds the key.
    pub(super) async fn wait_out_quarantine(
        &self,
        route: &Route,
        ask: Ask,
        age: Duration,
    ) -> Result<Claim<Lease>, StoreError> {
        let quarantine = self.0.redis.vouch_quarantine().unwrap_or_default();
        (self.0.redis).release(&ask.redis_key, &ask.token).await?;
        tracing::info!(key_hash = %ask.record.short(), wait_ms = (quarantine - age).as_millis() as u64,
            "redis lost this key's slot lately: the claim waits until every lease it may \
            have held was written back");
        tokio::time::sleep(quarantine.saturating_sub(age)).await;
        (self.claim_here(route, ask.scope, ask.record, ask.fingerprint, ask.resend)).await
    }

    /// Redis cannot be reached: it kept claims Postgres never saw, and their holders
    /// may still run. Postgres answers what it holds (a stored answer, a claim written
    /// through); a key it does not know is not taken (`cause`, a 503).
    pub(super) async fn answer_without_redis(
        &self,
        pg: &Durable,
        route: &Route,
        ask: Ask,
        cause: StoreError,
    ) -> Result<Claim<Lease>, StoreError> {
        let rec = RecordRef {
            scope: ask.scope,
            id: ask.record,
            route: &route.name,
        };
        let at = Binding {
            scope: ask.scope,
            record: ask.record,
        };
        match pg.lookups.lookup(rec).await? {
            Some(found) => {
                metrics::fallback("redis_unavailable_lookup");
                self.found_to_claim(found, &ask.fingerprint, at)
            }
            None => {
                metrics::fallback("rejected");
                Err(cause)
            }
        }
    }
}
