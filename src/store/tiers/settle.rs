//! The settle phase: a lease holder's heartbeat and its completion (compare-and-set in
//! its home tier, then write-through; both at once where the claim was written
//! through); its release is in [`lapse`](super::lapse).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::super::lease::Held;
use super::super::postgres::writer::WriteOutcome;
use super::super::postgres::{stored_columns, CompletedRecord, RecordRef};
use super::super::StoreError;
use super::{Durable, Stores};
use crate::idempotency::{Binding, Completion, Encoded, Expiry, Home};
use crate::metrics;

impl Stores {
    /// The holder's heartbeat: extends the lease in every tier that holds it.
    pub(crate) async fn extend(&self, lease: &Held, ttl: Duration) -> Result<bool, StoreError> {
        let rec = lease_ref(lease);
        match (lease.home, &self.0.postgres) {
            (Home::Postgres, Some(pg)) => pg.store.extend(rec, &lease.token, ttl).await,
            (Home::Redis { also_in_postgres }, pg) => {
                let in_redis = (self.0.redis)
                    .extend(
                        &lease.redis_key,
                        &lease.token,
                        ttl,
                        &lease.fingerprint,
                        lease.fence,
                    )
                    .await;
                match (also_in_postgres, pg) {
                    // Claims written through: Postgres decides who holds the key, so its
                    // lease is extended even while Redis fails (or lost ours in a
                    // failover); otherwise it runs out and a retry claiming in Postgres
                    // takes the key over while this execution still runs.
                    (true, Some(pg)) => {
                        let in_pg = pg.store.extend(rec, &lease.token, ttl).await?;
                        match in_redis {
                            Err(e) if !in_pg => Err(e),
                            _ => Ok(in_pg),
                        }
                    }
                    _ => in_redis,
                }
            }
            (Home::Postgres, None) => Ok(false),
        }
    }

    /// Settles a lease with a response, kept until `expiry` in every tier:
    /// compare-and-set in its home tier, then write-through to Postgres before the
    /// caller answers (both at once where the claim was written through: Postgres
    /// decides then).
    pub(crate) async fn complete(
        &self,
        lease: &Held,
        response: &Encoded,
        expiry: Expiry,
    ) -> Result<Completion, StoreError> {
        // Sealed once, from the one encoding: both tiers store the same bytes.
        let sealed = self.0.sealing.seal(&response.bytes, binding(lease));
        let record = || {
            let (status, headers, body) = stored_columns(response, sealed.clone());
            CompletedRecord {
                scope: lease.scope,
                id: lease.record,
                route: lease.route.clone(),
                fingerprint: lease.fingerprint,
                token: lease.token.clone(),
                status,
                headers,
                body,
                expiry,
                origin: response.compact.origin.map(|o| o.to_bytes()),
                claimed_in_postgres: !matches!(
                    lease.home,
                    Home::Redis {
                        also_in_postgres: false
                    }
                ),
            }
        };
        match lease.home {
            Home::Postgres => {
                let pg = self.0.postgres.as_ref().ok_or(StoreError::NoDurableTier)?;
                // Boxed (a claim Postgres took while Redis was away): rare, and inline
                // it would grow every completion's future.
                Box::pin(self.complete_in_postgres(pg, lease, record())).await
            }
            Home::Redis { also_in_postgres } => {
                let encoded = sealed.as_ref().unwrap_or(&response.bytes);
                // Filled on replay: Postgres alone, while it takes the record now (first
                // writer wins there, whichever tier holds the claim).
                let on_replay = !lease.live && self.fills_on_replay();
                let durable_first = match (&self.0.postgres, on_replay) {
                    (Some(pg), true) => match pg.writer.write(record()).await {
                        Ok(WriteOutcome::Written) => {
                            // Nothing is published: this replica's waiters are woken
                            // here, the others' at their next re-check.
                            if let Some(waiters) = &self.0.waiters {
                                waiters.wake(&self.0.redis.channel(&lease.redis_key));
                            }
                            return Ok(Completion::Stored);
                        }
                        Ok(WriteOutcome::Conflict) => return Ok(Completion::LeaseLost),
                        // Queued or failed: Redis takes the record as it would without
                        // on_replay, and the queued copy lands later.
                        not_now => Some(not_now),
                    },
                    _ => None,
                };
                if let Some(durable) = durable_first {
                    let in_redis = self.complete_in_redis(lease, encoded, expiry).await;
                    return (self.reconcile(lease, also_in_postgres, in_redis, durable)).await;
                }
                (self.complete_in_tiers(lease, encoded, expiry, also_in_postgres, record)).await
            }
        }
    }

    /// The completion of a lease held in Redis: Redis and then Postgres where Redis held
    /// the claim alone, both at once where the claim was written through.
    async fn complete_in_tiers(
        &self,
        lease: &Held,
        encoded: &Bytes,
        expiry: Expiry,
        also_in_postgres: bool,
        record: impl FnOnce() -> CompletedRecord,
    ) -> Result<Completion, StoreError> {
        match &self.0.postgres {
            // Claims written through: Postgres is the authority, its token check
            // decides whatever Redis answers (another request may have taken the
            // Redis key only because Redis lost ours). So both tiers take the
            // record at once, and the answer waits for the slower of the two,
            // not for one after the other.
            Some(pg) if also_in_postgres => {
                let (in_redis, durable) = tokio::join!(
                    self.complete_in_redis(lease, encoded, expiry),
                    pg.writer.write(record())
                );
                (self.reconcile(lease, true, in_redis, durable)).await
            }
            pg => {
                // The write-through that follows is announced: a busy round of the
                // writer waits for it instead of leaving it a statement of its own.
                let coming = pg.as_ref().map(|pg| pg.writer.coming());
                let in_redis = self.complete_in_redis(lease, encoded, expiry).await;
                // Lost in Redis, where claims are held: the other holder's
                // answer is the one to keep.
                if matches!(in_redis, Ok(Completion::LeaseLost)) {
                    return in_redis;
                }
                let Some(pg) = pg else {
                    return in_redis;
                };
                let durable = pg.writer.write_coming(record(), coming).await;
                (self.reconcile(lease, false, in_redis, durable)).await
            }
        }
    }

    /// Stores the response in Redis under the lease, retrying while Redis fails: three
    /// tries when Postgres can take the record instead, else as long as the lease lasts.
    async fn complete_in_redis(
        &self,
        lease: &Held,
        encoded: &Bytes,
        expiry: Expiry,
    ) -> Result<Completion, StoreError> {
        // Each try asks Redis for what is left until the expiry: the record never
        // outlives the moment its answers advertise.
        let complete = || {
            (self.0.redis).complete(
                &lease.redis_key,
                &lease.token,
                encoded.clone(),
                expiry.remaining(),
                &lease.fingerprint,
            )
        };
        // Postgres takes the record if Redis cannot: three tries are enough. Redis
        // only: a response Redis does not take is not stored anywhere, and the key runs
        // again after its lease. Keep trying while the lease lasts (a failover promotes
        // a replica within it).
        let until = self.0.postgres.is_none().then_some(lease);
        // Boxed: fred's call is ~8 KiB of future. Inline, it would set the size of every
        // execution's task from the upstream call to the write-through, for a step that
        // takes a fraction of that time; boxed, it is held only while Redis is asked.
        Box::pin(retry_redis(until, complete)).await
    }

    /// What a completion in Redis and its write-through to Postgres come to together;
    /// a durable copy that is missing or only queued is logged.
    async fn reconcile(
        &self,
        lease: &Held,
        also_in_postgres: bool,
        in_redis: Result<Completion, StoreError>,
        durable: Result<WriteOutcome, StoreError>,
    ) -> Result<Completion, StoreError> {
        match (&in_redis, &durable) {
            (_, Err(e)) => tracing::error!(key_hash = %lease.record.short(), error = %e,
                "stored response has no durable copy"),
            (_, Ok(WriteOutcome::Queued)) => {
                tracing::warn!(key_hash = %lease.record.short(),
                "postgres unavailable: durable copy queued for retry")
            }
            _ => {}
        }
        match (in_redis, durable) {
            (Ok(Completion::LeaseLost), Ok(WriteOutcome::Written)) if also_in_postgres => {
                // Redis names another holder, yet Postgres took the record: as a new
                // row if our claim row was gone (a forced invalidation): the other
                // holder, kept by Redis alone, runs the key again and its answer must be
                // the one both tiers keep.
                Box::pin(self.lost_in_redis_written_in_postgres(lease)).await
            }
            (Err(_) | Ok(Completion::LeaseLost), Ok(WriteOutcome::Written)) => {
                // Stored, but Redis lacks it while our lease there runs out: with
                // when_cold, a retry after that must look it up, on every replica.
                Box::pin(self.redis_lacks_record(lease)).await;
                Ok(Completion::Stored)
            }
            (_, Ok(WriteOutcome::Conflict)) if also_in_postgres => Ok(Completion::LeaseLost),
            (Ok(Completion::Stored), Ok(WriteOutcome::Conflict)) => {
                // claims = "redis": Redis decides who holds a key; Postgres held
                // another record for it (a claim taken while Redis was away).
                metrics::tier_disagreement("stored_in_redis_conflict_in_postgres");
                tracing::warn!(key_hash = %lease.record.short(),
                    "tiers disagree: stored in redis, but postgres holds another \
                    record for this key (redis decides with claims = \"redis\")");
                Ok(Completion::Stored)
            }
            (result, _) => result,
        }
    }

    /// A written-through claim's completion that Redis refused (another token holds the
    /// key) and Postgres took: withdrawn if Postgres took it as a new row, since no
    /// claim row of ours stood there to decide for us; else stored, Postgres deciding.
    async fn lost_in_redis_written_in_postgres(
        &self,
        lease: &Held,
    ) -> Result<Completion, StoreError> {
        let pg = self.0.postgres.as_ref().ok_or(StoreError::NoDurableTier)?;
        match pg.store.withdraw_new(lease_ref(lease), &lease.token).await {
            Ok(true) => {
                tracing::warn!(key_hash = %lease.record.short(),
                    "completion withdrawn from postgres: its claim row was gone (a forced \
                    invalidation) and redis holds the key for another execution");
                return Ok(Completion::LeaseLost);
            }
            Ok(false) => {}
            Err(e) => tracing::error!(key_hash = %lease.record.short(), error = %e,
                "could not check whether postgres took the completion as a new row; it stands"),
        }
        self.redis_lacks_record(lease).await;
        Ok(Completion::Stored)
    }

    /// Completes a lease held in Postgres (Redis was unavailable when it was taken).
    /// The client is answered only once the record is durable: while Postgres fails,
    /// keep the lease alive and retry, and never count a record that merely waits in
    /// the retry queue as stored (its lease could run out, a retry take the key over
    /// and run it again, and the queued copy then lose to that execution).
    async fn complete_in_postgres(
        &self,
        pg: &Durable,
        lease: &Held,
        record: CompletedRecord,
    ) -> Result<Completion, StoreError> {
        // While Postgres does not answer, nobody can take the lease over; once it answers
        // we are first in line: retrying every 100 ms, with the heartbeat in between.
        let give_up = Instant::now() + lease.lock_ttl;
        loop {
            let failed = match pg.store.complete_batch(std::slice::from_ref(&record)).await {
                Ok(written) if written.first() == Some(&true) => return Ok(Completion::Stored),
                Ok(_) => return Ok(Completion::LeaseLost),
                Err(e) => e,
            };
            if super::super::postgres::writer::refused(&failed) {
                // Postgres answered: it will never take this record. Nothing to wait for.
                tracing::error!(key_hash = %lease.record.short(), error = %failed,
                    "postgres refused the response; it is not stored");
                return Err(failed);
            }
            if Instant::now() >= give_up {
                // Not acknowledged as stored; the retry queue may still land it.
                let queued = pg.writer.write(record).await;
                tracing::error!(key_hash = %lease.record.short(), error = %failed, ?queued,
                    "postgres did not come back within the lease: the response is not \
                    stored; a retry after the lease may run again");
                return Err(failed);
            }
            let _ = pg
                .store
                .extend(lease_ref(lease), &lease.token, lease.lock_ttl)
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Postgres holds a record that Redis does not: make Redis cold for lookups
    /// (here at once; on every replica once the marker reset lands, retried by the probe).
    async fn redis_lacks_record(&self, lease: &Held) {
        metrics::fallback("redis_lacks_record");
        tracing::warn!(key_hash = %lease.record.short(), "stored in postgres only: \
            redis counts as cold until the warmth marker is reset");
        self.0
            .warmth
            .set_cold(super::super::redis::slots::slot(&lease.redis_key));
        // This record's slot, before the client is answered (one DEL): a retry on
        // another replica then looks the key up. If it fails, the reset below (retried
        // by the probe) still covers the slot.
        let _ = self.0.redis.reset_slot_marker(&lease.redis_key).await;
        let stores = self.clone();
        tokio::spawn(async move {
            stores.0.warmth.reset(&stores.0.redis).await;
        });
    }
}

/// Runs a settling script up to three times on Redis errors (50 ms, then 150 ms apart):
/// every script is safe to run twice with the same token, and one lost completion
/// would let a retry run again after the lease. With `until` (Redis is the only store,
/// where giving up means the response is lost and the key runs twice), it then keeps
/// trying every 500 ms while that lease lasts (the heartbeat pushes its end out
/// whenever it lands; a failover promotes a replica within it). Retrying past the lease
/// would be safe (the script's token check refuses a lease no longer ours) but pointless.
pub(super) async fn retry_redis<T, F, Fut>(
    until: Option<&Held>,
    mut call: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut result = call().await;
    let mut tries = 1;
    while matches!(&result, Err(e) if e.is_redis()) {
        let pause = Duration::from_millis(match tries {
            1 => 50,
            2 => 150,
            _ => 500,
        });
        if tries >= 3 {
            let Some(lease) = until else { break };
            if Instant::now() + pause >= lease.runs_out_at() {
                break;
            }
            if tries == 3 {
                tracing::warn!(key_hash = %lease.record.short(),
                    "redis did not take the response in three tries; retrying while the lease lasts");
            }
        }
        tokio::time::sleep(pause).await;
        result = call().await;
        tries += 1;
    }
    result
}

/// What a lease's record is sealed to.
pub(super) fn binding(lease: &Held) -> Binding {
    Binding {
        scope: lease.scope,
        record: lease.record,
    }
}

pub(super) fn lease_ref(lease: &Held) -> RecordRef<'_> {
    RecordRef {
        scope: lease.scope,
        id: lease.record,
        route: &lease.route,
    }
}
