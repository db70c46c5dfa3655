//! Records outside the claim path: the replay cache (read, fill, invalidate; the one
//! place it is reached), what the admin API shows and deletes, the health that
//! `/readyz` reports, and the drain at shutdown.

use std::sync::Arc;
use std::time::Duration;

use super::super::memory::Entry;
use super::super::postgres::{PgRecord, RecordRef};
use super::super::redis::{Invalidated, RedisRecord};
use super::super::StoreError;
use super::Stores;
use crate::idempotency::{Encoded, Fingerprint, RecordId, Scope, StoredResponse};

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

/// One store's answer to a readiness check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    /// It answered with an error (logged here, never shown).
    Down,
    /// No answer in time.
    Silent,
}

impl Health {
    fn of<E: std::fmt::Display>(
        name: &'static str,
        r: Result<Result<(), E>, tokio::time::error::Elapsed>,
    ) -> Self {
        match r {
            Ok(Ok(())) => Health::Up,
            Ok(Err(e)) => {
                tracing::warn!(dependency = name, error = %e, "readiness check failed");
                Health::Down
            }
            Err(_) => Health::Silent,
        }
    }
}

impl Stores {
    /// A completed record this replica has seen, from memory.
    pub fn cached(&self, record: RecordId) -> Option<Arc<Entry>> {
        self.0.cache.as_ref().and_then(|c| c.get(record))
    }

    /// The replay cache's view (0 when it is off): take it before asking the tiers
    /// for a record, and remember what they answered with it. A view ends whenever
    /// this replica's view of Redis changes (see `forget_replays`); what was read in
    /// an earlier one is not cached.
    pub fn replay_view(&self) -> u64 {
        self.0.cache.as_ref().map_or(0, |c| c.view())
    }

    /// Keeps a completed record in memory for replays (when the cache is on), read in
    /// view `seen_in` ([`Stores::replay_view`]).
    pub fn remember(
        &self,
        record: RecordId,
        fingerprint: Fingerprint,
        response: &StoredResponse,
        remaining: Duration,
        seen_in: u64,
    ) {
        if let Some(cache) = &self.0.cache {
            cache.insert(record, fingerprint, response, remaining, seen_in);
        }
    }

    /// [`Stores::remember`] of a compact copy (the one an [`Encoded`] carries).
    pub fn remember_encoded(
        &self,
        record: RecordId,
        fingerprint: Fingerprint,
        response: Encoded,
        remaining: Duration,
        seen_in: u64,
    ) {
        if let Some(cache) = &self.0.cache {
            cache.insert_compact(record, fingerprint, response.compact, remaining, seen_in);
        }
    }

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
        let postgres = match &self.0.postgres {
            None => None,
            Some(pg) => {
                let rec = record_ref(route, scope, record);
                Some(pg.store.invalidate(rec, force).await?)
            }
        };
        if let Some(leased @ Invalidated::Leased { .. }) = postgres {
            return Ok(Invalidation {
                redis: Invalidated::Absent,
                postgres: Some(leased),
            });
        }
        let key = self.0.redis.record_key(record);
        // With write-through claims Redis may keep the lease of an execution that
        // completed in Postgres only (filled on replay, on any replica): Postgres
        // decides, and what it just deleted is gone in Redis too.
        let decided = self.confirms_in_flight() && postgres == Some(Invalidated::Deleted);
        let redis = self.0.redis.invalidate(&key, force || decided).await?;
        // The replay caches may hold a copy even when neither tier had one left.
        if let Some(cache) = &self.0.cache {
            cache.remove(record);
        }
        if let Err(e) = self.0.redis.publish_invalidation(&key).await {
            tracing::warn!(error = %e, "could not publish the invalidation to other replicas");
        }
        Ok(Invalidation { redis, postgres })
    }

    /// Readiness of Redis, and of Postgres with its write-through queue depth (`None`
    /// without `[postgres]`).
    pub async fn health(&self, deadline: Duration) -> (Health, Option<(Health, usize)>) {
        let redis = Health::of(
            "redis",
            tokio::time::timeout(deadline, self.0.redis.ping()).await,
        );
        let postgres = match &self.0.postgres {
            None => None,
            Some(pg) => {
                let ping = tokio::time::timeout(deadline, pg.store.ping()).await;
                Some((Health::of("postgres", ping), pg.writer.queue_depth()))
            }
        };
        (redis, postgres)
    }

    /// Completed records waiting for Postgres in the write-through retry queue.
    pub fn queue_depth(&self) -> usize {
        self.0
            .postgres
            .as_ref()
            .map_or(0, |pg| pg.writer.queue_depth())
    }

    /// Whether every claim goes to Redis (no shard's breaker is open).
    pub fn claims_in_redis(&self) -> bool {
        !self.0.breaker.any_open()
    }

    /// At shutdown: drains the write-through queue within `left` (what is left of
    /// `server.shutdown_grace`), then closes the Redis connections.
    pub async fn close(&self, left: Duration) {
        if let Some(pg) = &self.0.postgres {
            pg.writer.drain(left).await;
        }
        self.0.redis.quit().await;
    }
}

fn record_ref(route: &str, scope: Scope, id: RecordId) -> RecordRef<'_> {
    RecordRef { scope, id, route }
}
