//! Redis and Postgres together: the claim path across tiers, write-through of
//! completions, the Redis circuit breaker and its fallback policies, and the
//! background probe and reaper tasks.
//!
//! * A claim goes to Redis unless its breaker is open. An acquired Redis claim is
//!   checked against Postgres first (cold-Redis lookup, or a Postgres claim with
//!   `postgres.claims = "write_through"`), so a key Redis forgot is replayed, not re-run.
//! * While Redis fails, `on_redis_unavailable` decides: claim in Postgres with the same
//!   semantics, answer 503, or forward without idempotency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::breaker::Breaker;
use super::memory::ReplayCache;
use super::postgres::lookups::Lookups;
use super::postgres::writer::{WriteOutcome, Writer};
use super::postgres::{CompletedRecord, Found, PgClaim, RecordRef};
use super::redis::Record;
use super::waiters::Waiters;
use super::warmth::Warmth;
use super::{PgStore, RedisStore, StoreError};
use crate::config::{ClaimDurability, Config, OnRedisUnavailable};
use crate::idempotency::claim::Home;
use crate::idempotency::{
    Claim, Completion, Fingerprint, Lease, RecordId, Release, Scope, StoredResponse,
};
use crate::metrics;
use crate::route::Route;

/// The durable tier, when `[postgres]` is configured.
pub struct Durable {
    pub store: PgStore,
    pub writer: Writer,
    /// Cold-Redis lookups, batched.
    pub lookups: Lookups,
    pub claims: ClaimDurability,
}

/// Both tiers and their health state. Cheap to clone.
#[derive(Clone)]
pub struct Stores(Arc<Inner>);

pub struct Inner {
    pub redis: RedisStore,
    pub postgres: Option<Durable>,
    pub breaker: Breaker,
    pub warmth: Warmth,
    /// Present when some route lets duplicates wait, or the replay cache is on.
    pub waiters: Option<Arc<Waiters>>,
    /// Completed records this replica has seen (`replay_cache`).
    pub cache: Option<Arc<ReplayCache>>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

impl std::ops::Deref for Stores {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Stores {
    pub fn new(
        config: &Config,
        redis: RedisStore,
        postgres: Option<Durable>,
        waiters: Option<Arc<Waiters>>,
        cache: Option<Arc<ReplayCache>>,
    ) -> Self {
        let lookup = config.postgres.as_ref().map(|p| p.lookup_on_miss);
        Self(Arc::new(Inner {
            redis,
            postgres,
            waiters,
            cache,
            breaker: Breaker::default(),
            warmth: Warmth::new(
                lookup.unwrap_or(crate::config::LookupOnMiss::Always),
                config.longest_ttl(),
            ),
        }))
    }

    /// Claims (scope, key) for a request on `route`.
    ///
    /// The lease belongs to the gateway, not to the caller's connection: the claim runs
    /// as a task of its own, so a caller that goes away while the claim is on its way
    /// (a client timeout, a reset) cannot strand a lease that landed. Its [`Claim`] is
    /// then dropped with nobody to take it, and a dropped [`Lease`] releases itself.
    pub async fn claim(
        &self,
        route: &Arc<Route>,
        scope: Scope,
        record: RecordId,
        fingerprint: &Fingerprint,
    ) -> Result<Claim, StoreError> {
        let (stores, route, fingerprint) = (self.clone(), route.clone(), *fingerprint);
        tokio::spawn(async move { stores.claim_here(&route, scope, record, fingerprint).await })
            .await
            .unwrap_or_else(|e| Err(StoreError::ClaimTask(e)))
    }

    /// The claim itself; runs to the end once started (see [`Stores::claim`]).
    async fn claim_here(
        &self,
        route: &Route,
        scope: Scope,
        record: RecordId,
        fingerprint: Fingerprint,
    ) -> Result<Claim, StoreError> {
        let ask = Ask {
            redis_key: self.redis.record_key(record),
            token: uuid::Uuid::new_v4().simple().to_string(),
            scope,
            record,
            fingerprint,
        };
        if self.breaker.is_open() {
            return self.fallback(route, ask, StoreError::RedisDown).await;
        }
        let policy = &route.policy;
        let claimed = (self.redis)
            .claim(
                &ask.redis_key,
                &fingerprint,
                &ask.token,
                policy.lock_ttl,
                policy.ttl + policy.lock_ttl,
            )
            .await;
        match claimed {
            Ok(Claim::Acquired(acquired)) => {
                let home = Home::Redis {
                    also_in_postgres: false,
                };
                let lease = self.lease(route, ask, home, acquired.fence);
                self.after_redis_acquire(route, lease, acquired.marker_age)
                    .await
            }
            Ok(other) => Ok(other.map_acquired(|_| unreachable!("handled above"))),
            Err(e @ StoreError::Unavailable(_)) => {
                if self.breaker.trip() {
                    self.warmth.set_cold();
                    metrics::redis_up(false);
                    tracing::error!(error = %e, "redis failing: claims follow on_redis_unavailable \
                        until it answers again");
                }
                self.fallback(route, ask, e).await
            }
            // A Redis that answers with an error (OOM, READONLY...) or slowly is still
            // the authority: this request fails, claims stay in Redis.
            Err(e) => Err(e),
        }
    }

    /// A held lease, unsettled from here on: it must be completed or released.
    fn lease(&self, route: &Route, ask: Ask, home: Home, fence: i64) -> Lease {
        Lease {
            stores: self.clone(),
            home,
            redis_key: ask.redis_key,
            token: ask.token,
            route: route.name.clone(),
            lock_ttl: route.policy.lock_ttl,
            scope: ask.scope,
            record: ask.record,
            fingerprint: ask.fingerprint,
            fence,
            settled: false,
        }
    }

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
    ) -> Result<Claim, StoreError> {
        let in_flight = Claim::InFlight { remaining };
        let Some(waiters) = &self.waiters else {
            return Ok(in_flight);
        };
        let policy = &route.policy;
        let key = self.redis.record_key(record);
        let id = uuid::Uuid::new_v4().simple().to_string();
        match (self.redis)
            .join_waiters(&key, policy.max_waiters, &id, policy.wait_timeout * 2)
            .await
        {
            Ok(true) => {}
            _ => return Ok(in_flight),
        }
        // Leaves the waiters however this ends, a caller hanging up included.
        let _slot = WaiterSlot {
            redis: self.redis.clone(),
            key,
            id,
        };
        let watch = waiters.watch(self.redis.channel(&_slot.key));
        let deadline = Instant::now() + policy.wait_timeout;
        let result = loop {
            let notified = watch.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.claim(route, scope, record, fingerprint).await {
                Ok(Claim::InFlight { remaining }) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Ok(Claim::InFlight { remaining });
                    }
                    // Woken by the holder, or when its lease runs out, whichever is first.
                    let nap = (remaining + Duration::from_millis(10)).min(left);
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep(nap) => {}
                    }
                }
                other => break other,
            }
        };
        result
    }

    /// What the stores hold for a record now, without claiming it (Redis, then
    /// Postgres); `None` when neither has it.
    pub async fn find(
        &self,
        route: &Route,
        scope: Scope,
        record: RecordId,
        fingerprint: &Fingerprint,
    ) -> Result<Option<Claim>, StoreError> {
        if !self.breaker.is_open() {
            let key = self.redis.record_key(record);
            if let Record::Known(claim) = self.redis.peek(&key, fingerprint).await? {
                return Ok(Some(
                    claim.map_acquired(|_| unreachable!("peek never acquires")),
                ));
            }
        }
        let Some(pg) = &self.postgres else {
            return Ok(None);
        };
        let rec = RecordRef {
            scope,
            id: record,
            route: &route.name,
        };
        let found = pg.lookups.lookup(rec).await?;
        Ok(found.map(|found| found_to_claim(found, fingerprint)))
    }

    /// `lease` was acquired under a key's current id, but the key may be stored under
    /// the id it had before a scope secret was introduced (`lookup_unkeyed_ids`). A
    /// completed old record is copied to the new id (the lease completes with it) and
    /// answers; an old lease or mismatch answers and the new lease goes; if Postgres
    /// cannot say, the claim fails closed.
    pub async fn under_previous_id(
        &self,
        route: &Route,
        lease: Lease,
        old_scope: Scope,
        old_record: RecordId,
    ) -> Result<Claim, StoreError> {
        let answer = match (self.find(route, old_scope, old_record, &lease.fingerprint())).await {
            Ok(None) => return Ok(Claim::Acquired(lease)),
            Ok(Some(Claim::Completed {
                response,
                remaining,
            })) => {
                // Carry the record over to its new id: later retries find it at once.
                metrics::fallback("previous_id");
                if let Err(e) = lease.complete(&response, remaining).await {
                    tracing::warn!(error = %e, "could not copy the record to its new id");
                }
                return Ok(Claim::Completed {
                    response,
                    remaining,
                });
            }
            Ok(Some(claim)) => Ok(claim),
            Err(e) => Err(e),
        };
        metrics::fallback("previous_id");
        if let Err(e) = lease.release().await {
            tracing::debug!(error = %e, "could not release; the lease expires");
        }
        answer
    }

    /// The holder's heartbeat: extends the lease in every tier that holds it.
    pub(crate) async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        let rec = lease_ref(lease);
        match (lease.home, &self.postgres) {
            (Home::Postgres, Some(pg)) => pg.store.extend(rec, &lease.token, ttl).await,
            (Home::Redis { also_in_postgres }, pg) => {
                let held = self
                    .redis
                    .extend(&lease.redis_key, &lease.token, ttl)
                    .await?;
                if let (true, Some(pg)) = (also_in_postgres, pg) {
                    pg.store.extend(rec, &lease.token, ttl).await?;
                }
                Ok(held)
            }
            (Home::Postgres, None) => Ok(false),
        }
    }

    /// Redis said Acquired: make sure Postgres does not know better.
    async fn after_redis_acquire(
        &self,
        route: &Route,
        mut lease: Lease,
        marker_age: Duration,
    ) -> Result<Claim, StoreError> {
        let Some(pg) = &self.postgres else {
            return Ok(Claim::Acquired(lease));
        };
        let rec = lease_ref(&lease);
        let found = if pg.claims == ClaimDurability::WriteThrough {
            match (pg.store)
                .claim(rec, &lease.fingerprint, &lease.token, route.policy.lock_ttl)
                .await
            {
                Ok(PgClaim::Acquired { .. }) => {
                    lease.home = Home::Redis {
                        also_in_postgres: true,
                    };
                    return Ok(Claim::Acquired(lease));
                }
                Ok(PgClaim::Held(found)) => found,
                Err(e) => {
                    // The stricter mode promises a durable claim before forwarding.
                    let _ = lease.release().await;
                    return Err(e);
                }
            }
        } else if self.warmth.must_lookup(marker_age) {
            match pg.lookups.lookup(rec).await {
                Ok(None) => return Ok(Claim::Acquired(lease)),
                Ok(Some(found)) => found,
                Err(e) if self.warmth.vouches(marker_age) => {
                    tracing::warn!(record = %lease.record.short(), error = %e,
                        "postgres lookup failed; redis provably holds every recent record \
                        (warm), so its claim stands");
                    return Ok(Claim::Acquired(lease));
                }
                Err(e) => {
                    // Redis may have lost this key, and Postgres cannot say whether it
                    // completed: fail closed rather than risk running it twice.
                    metrics::fallback("lookup_failed");
                    let _ = lease.release().await;
                    return Err(StoreError::LookupFailed(Box::new(e)));
                }
            }
        } else {
            return Ok(Claim::Acquired(lease));
        };
        self.settle_with_found(lease, found).await
    }

    /// Postgres knows this key although Redis did not: settle the fresh Redis lease
    /// (re-warming a completed record with its remaining TTL) and report what it holds.
    async fn settle_with_found(&self, mut lease: Lease, found: Found) -> Result<Claim, StoreError> {
        lease.settled = true;
        match found {
            Found::Completed {
                fingerprint,
                response,
                remaining,
            } if fingerprint == lease.fingerprint => {
                metrics::fallback("cold_lookup_hit");
                tracing::info!(record = %lease.record.short(), "replaying from postgres; re-warming redis");
                if let Err(e) = (self.redis)
                    .complete(
                        &lease.redis_key,
                        &lease.token,
                        response.encode(),
                        remaining,
                        &fingerprint,
                    )
                    .await
                {
                    // Not re-warmed: free the key in Redis now rather than leave our lease
                    // to answer "in flight" for lock_ttl; the next claim looks up again.
                    tracing::warn!(error = %e, "could not re-warm redis");
                    let _ = self.redis.release(&lease.redis_key, &lease.token).await;
                }
                Ok(Claim::Completed {
                    response,
                    remaining,
                })
            }
            other => {
                metrics::fallback(match other {
                    Found::Leased { .. } => "cold_lookup_in_flight",
                    Found::Completed { .. } => "cold_lookup_mismatch",
                });
                let _ = self.redis.release(&lease.redis_key, &lease.token).await;
                Ok(found_to_claim(other, &lease.fingerprint))
            }
        }
    }

    /// Redis is unavailable: apply the route's policy.
    async fn fallback(
        &self,
        route: &Route,
        ask: Ask,
        cause: StoreError,
    ) -> Result<Claim, StoreError> {
        match (route.policy.on_redis_unavailable, &self.postgres) {
            (OnRedisUnavailable::Postgres, Some(pg)) => {
                metrics::fallback("redis_unavailable");
                let rec = RecordRef {
                    scope: ask.scope,
                    id: ask.record,
                    route: &route.name,
                };
                let claimed = (pg.store)
                    .claim(rec, &ask.fingerprint, &ask.token, route.policy.lock_ttl)
                    .await?;
                match claimed {
                    PgClaim::Acquired { fence } => {
                        let lease = self.lease(route, ask, Home::Postgres, fence);
                        Ok(Claim::Acquired(lease))
                    }
                    PgClaim::Held(found) => Ok(found_to_claim(found, &ask.fingerprint)),
                }
            }
            (OnRedisUnavailable::PassThrough, _) => {
                metrics::fallback("pass_through");
                Ok(Claim::Bypassed)
            }
            _ => {
                metrics::fallback("rejected");
                Err(cause)
            }
        }
    }

    /// Settles a lease with a response: compare-and-set in its home tier, then
    /// write-through to Postgres before the caller answers.
    pub(crate) async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Completion, StoreError> {
        let record = || CompletedRecord {
            scope: lease.scope,
            id: lease.record,
            route: lease.route.clone(),
            fingerprint: lease.fingerprint,
            token: lease.token.clone(),
            status: response.status.as_u16() as i16,
            headers: response.encode_headers(),
            body: response.body.clone(),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        };
        match lease.home {
            Home::Postgres => {
                let pg = self.postgres.as_ref().ok_or(StoreError::RedisDown)?;
                self.complete_in_postgres(pg, lease, record()).await
            }
            Home::Redis { also_in_postgres } => {
                let encoded = response.encode();
                let in_redis = retry_redis(|| {
                    (self.redis).complete(
                        &lease.redis_key,
                        &lease.token,
                        encoded.clone(),
                        ttl,
                        &lease.fingerprint,
                    )
                })
                .await;
                // Lost in Redis: with claims only in Redis, the other holder's answer is
                // the one to keep. With claims written through, Postgres is the
                // authority: its token check decides (another request may have taken
                // the Redis key only because Redis lost ours).
                if matches!(in_redis, Ok(Completion::LeaseLost)) && !also_in_postgres {
                    return in_redis;
                }
                let Some(pg) = &self.postgres else {
                    return in_redis;
                };
                let durable = pg.writer.write(record()).await;
                match (&in_redis, &durable) {
                    (_, Err(e)) => tracing::error!(record = %lease.record.short(), error = %e,
                        "stored response has no durable copy"),
                    (_, Ok(WriteOutcome::Queued)) => tracing::warn!(record = %lease.record.short(),
                        "postgres unavailable: durable copy queued for retry"),
                    _ => {}
                }
                match (in_redis, durable) {
                    (Err(_) | Ok(Completion::LeaseLost), Ok(WriteOutcome::Written)) => {
                        // Stored, but Redis lacks it while our lease there runs out: with
                        // when_cold, a retry after that must look it up, on every replica.
                        self.redis_lacks_record(lease);
                        Ok(Completion::Stored)
                    }
                    (_, Ok(WriteOutcome::Conflict)) if also_in_postgres => {
                        Ok(Completion::LeaseLost)
                    }
                    (Ok(Completion::Stored), Ok(WriteOutcome::Conflict)) => {
                        // claims = "redis": Redis decides who holds a key; Postgres held
                        // another record for it (a claim taken while Redis was away).
                        metrics::tier_disagreement("stored_in_redis_conflict_in_postgres");
                        tracing::warn!(record = %lease.record.short(),
                            "tiers disagree: stored in redis, but postgres holds another \
                            record for this key (redis decides with claims = \"redis\")");
                        Ok(Completion::Stored)
                    }
                    (result, _) => result,
                }
            }
        }
    }

    /// Completes a lease held in Postgres (Redis was unavailable when it was taken).
    /// The client is answered only once the record is durable: while Postgres fails,
    /// keep the lease alive and retry, and never count a record that merely waits in
    /// the retry queue as stored (its lease could run out, a retry take the key over
    /// and run it again, and the queued copy then lose to that execution).
    async fn complete_in_postgres(
        &self,
        pg: &Durable,
        lease: &Lease,
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
            if super::postgres::writer::refused(&failed) {
                // Postgres answered: it will never take this record. Nothing to wait for.
                tracing::error!(record = %lease.record.short(), error = %failed,
                    "postgres refused the response; it is not stored");
                return Err(failed);
            }
            if Instant::now() >= give_up {
                // Not acknowledged as stored; the retry queue may still land it.
                let queued = pg.writer.write(record).await;
                tracing::error!(record = %lease.record.short(), error = %failed, ?queued,
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
    fn redis_lacks_record(&self, lease: &Lease) {
        metrics::fallback("redis_lacks_record");
        tracing::warn!(record = %lease.record.short(), "stored in postgres only: \
            redis counts as cold until the warmth marker is reset");
        self.warmth.set_cold();
        let stores = self.clone();
        tokio::spawn(async move {
            stores.warmth.reset(&stores.redis).await;
        });
    }

    /// Releases a lease in every tier that holds it.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<Release, StoreError> {
        let rec = lease_ref(lease);
        match (lease.home, &self.postgres) {
            (Home::Postgres, Some(pg)) => pg.store.release(rec, &lease.token).await,
            (Home::Redis { also_in_postgres }, pg) => {
                let released =
                    retry_redis(|| self.redis.release(&lease.redis_key, &lease.token)).await;
                if let (true, Some(pg)) = (also_in_postgres, pg) {
                    pg.store.release(rec, &lease.token).await?;
                }
                released
            }
            (Home::Postgres, None) => Ok(Release::NotHeld),
        }
    }

    /// Spawns the Redis probe (breaker and warmth) and, with Postgres, the reaper.
    pub fn spawn_background(&self, probe_interval: Duration, reap: Option<(Duration, usize)>) {
        let stores = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(probe_interval).await;
                stores.probe().await;
            }
        });
        if let (Some((every, batch)), Some(_)) = (reap, &self.postgres) {
            let stores = self.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if let Some(pg) = &stores.postgres {
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
    /// The probe's write is the reset of the warmth marker, which is owed anyway:
    /// whatever was written during the outage is in Postgres only. A Redis that answers
    /// PING but refuses writes (a demoted primary, READONLY) keeps the breaker open, and
    /// the breaker never closes with the marker still claiming Redis holds everything.
    pub async fn probe(&self) {
        if self.breaker.is_open() {
            self.warmth.set_cold();
            if self.warmth.reset(&self.redis).await {
                self.breaker.close();
                metrics::redis_up(true);
                tracing::info!("redis takes writes again: claims are back in redis");
            }
            return;
        }
        self.warmth.refresh(&self.redis).await;
    }
}

/// Runs a settling script up to three times on Redis errors (50 ms, then 150 ms apart):
/// every script is safe to run twice with the same token, and one lost completion
/// would let a retry run again after the lease.
async fn retry_redis<T, F, Fut>(mut call: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut result = call().await;
    for pause in [50, 150] {
        match &result {
            Err(e) if e.is_redis() => {
                tokio::time::sleep(Duration::from_millis(pause)).await;
                result = call().await;
            }
            _ => break,
        }
    }
    result
}

/// What a claim is about, before any store holds anything for it.
struct Ask {
    redis_key: String,
    token: String,
    scope: Scope,
    record: RecordId,
    fingerprint: Fingerprint,
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

fn lease_ref(lease: &Lease) -> RecordRef<'_> {
    RecordRef {
        scope: lease.scope,
        id: lease.record,
        route: &lease.route,
    }
}

/// What a Postgres record means for a request with `fingerprint`.
fn found_to_claim(found: Found, fingerprint: &Fingerprint) -> Claim {
    match found {
        Found::Completed {
            fingerprint: stored,
            response,
            remaining,
        } if stored == *fingerprint => Claim::Completed {
            response,
            remaining,
        },
        Found::Leased {
            fingerprint: stored,
            remaining,
        } if stored == *fingerprint => Claim::InFlight { remaining },
        _ => Claim::Mismatch,
    }
}
