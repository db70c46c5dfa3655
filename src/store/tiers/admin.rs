//! Records as the admin API sees them: what each tier holds for a key, and its
//! invalidation in both tiers and every replica's replay cache.

use super::super::postgres::{PgRecord, RecordRef};
use super::super::redis::{Invalidated, Leases, RedisRecord};
use super::super::StoreError;
use super::Stores;
use crate::idempotency::{RecordId, Scope};

/// Where a record stands in each tier (admin API).
#[derive(Debug)]
pub struct RecordView {
    pub redis: Option<RedisRecord>,
    /// `None` without `[postgres]`.
    pub postgres: Option<Option<PgRecord>>,
}

/// What an invalidation did in each tier (admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalidation {
    pub redis: Invalidated,
    /// `None` without `[postgres]`.
    pub postgres: Option<Invalidated>,
}

impl Stores {
    /// What each tier holds for a record.
    pub async fn inspect(
        &self,
        route: &str,
        scope: Scope,
        record: RecordId,
    ) -> Result<RecordView, StoreError> {
        let redis = self
            .0
            .redis
            .inspect(&self.0.redis.record_key(record))
            .await?;
        let postgres = match &self.0.postgres {
            None => None,
            Some(pg) => Some(pg.store.inspect(record_ref(route, scope, record)).await?),
        };
        Ok(RecordView { redis, postgres })
    }

    /// Deletes a record in both tiers unless a live lease holds it (or `force`). Each
    /// tier decides and deletes in one step, so a claim that lands meanwhile is never
    /// deleted without `force`; Postgres goes first, and a lease there stops the call
    /// before Redis is touched. Every replica's replay cache forgets the record.
    pub async fn invalidate(
        &self,
        route: &str,
        scope: Scope,
        record: RecordId,
        force: bool,
    ) -> Result<Invalidation, StoreError> {
        let (postgres, completed_by) = match &self.0.postgres {
            None => (None, None),
            Some(pg) => {
                let rec = record_ref(route, scope, record);
                let (invalidated, token) = pg.store.invalidate_record(rec, force).await?;
                (Some(invalidated), token)
            }
        };
        if let Some(leased @ Invalidated::Leased { .. }) = postgres {
            return Ok(Invalidation {
                redis: Invalidated::Absent,
                postgres: Some(leased),
            });
        }
        let key = self.0.redis.record_key(record);
        // Redis may keep the lease of an execution that completed in Postgres only
        // (filled on replay, on any replica), and what Postgres just deleted is gone in
        // Redis too. With write-through claims Postgres decides who holds the key (a
        // live lease would have kept its row): any lease goes. Elsewhere only the lease
        // of the execution whose record Postgres deleted: a claim Redis keeps alone has
        // no row to speak for it.
        let leases = match (force, postgres, &completed_by) {
            (true, _, _) => Leases::Delete,
            (_, Some(Invalidated::Deleted), _) if self.decides_holders() => Leases::Delete,
            (_, Some(Invalidated::Deleted), Some(token)) if self.completes_in_postgres() => {
                Leases::DeleteHeldBy(token)
            }
            _ => Leases::Keep,
        };
        let redis = self.0.redis.invalidate_with(&key, leases).await?;
        // The replay caches may hold a copy even when neither tier had one left.
        if let Some(cache) = &self.0.cache {
            cache.remove(record);
        }
        if let Err(e) = self.0.redis.publish_invalidation(&key).await {
            tracing::warn!(error = %e, "could not publish the invalidation to other replicas");
        }
        Ok(Invalidation { redis, postgres })
    }
}

fn record_ref(route: &str, scope: Scope, id: RecordId) -> RecordRef<'_> {
    RecordRef { scope, id, route }
}
