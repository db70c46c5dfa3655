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
    longest_ttl: Duration,
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
            warmth: Warmth::new(lookup.unwrap_or(crate::config::LookupOnMiss::Always)),
            longest_ttl: config.longest_ttl(),
        }))
    }

    /// Claims (scope, key) for a request on `route`.
    pub async fn claim(
        &self,
        route: &Route,
        scope: Scope,
        record: RecordId,
        fingerprint: &Fingerprint,
    ) -> Result<Claim, StoreError> {
        let mut lease = Lease {
            stores: self.clone(),
            home: Home::Redis {
                also_in_postgres: false,
            },
            redis_key: self.redis.record_key(record),
            token: uuid::Uuid::new_v4().simple().to_string(),
            route: route.name.clone(),
            scope,
            record,
            fingerprint: *fingerprint,
            fence: 0,
            // Nothing is held until a store says so.
            settled: true,
        };
        if self.breaker.is_open() {
            return self.fallback(route, lease, StoreError::RedisDown).await;
        }
        let policy = &route.policy;
        match (self.redis)
            .claim(
                &lease.redis_key,
                fingerprint,
                &lease.token,
                policy.lock_ttl,
                policy.ttl + policy.lock_ttl,
            )
            .await
        {
            Ok(Claim::Acquired(fence)) => {
                lease.fence = fence;
                self.after_redis_acquire(route, lease).await
            }
            Ok(other) => Ok(other.map_acquired(|_| unreachable!("handled above"))),
            Err(e @ StoreError::Unavailable(_)) => {
                if self.breaker.trip() {
                    self.warmth.set_cold();
                    metrics::redis_up(false);
                    tracing::error!(error = %e, "redis failing: claims follow on_redis_unavailable \
                        until it answers again");
                }
                self.fallback(route, lease, e).await
            }
            Err(e) => Err(e),
        }
    }

    /// A duplicate found the key in flight and may wait (`in_flight = "wait"`): joins the
    /// key's waiters (capped fleet-wide) and re-claims whenever the holder completes or
    /// releases (pub/sub) or its lease runs out, until `wait_timeout`.
    pub async fn wait(
        &self,
        route: &Route,
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
        match (self.redis)
            .join_waiters(&key, policy.max_waiters, policy.wait_timeout * 2)
            .await
        {
            Ok(true) => {}
            _ => return Ok(in_flight),
        }
        let watch = waiters.watch(self.redis.channel(&key));
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
        if let Err(e) = self.redis.leave_waiters(&key).await {
            tracing::debug!(error = %e, "could not leave the waiters count; it expires");
        }
        result
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
    ) -> Result<Claim, StoreError> {
        lease.settled = false;
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
        } else if self.warmth.must_lookup() {
            match pg.lookups.lookup(rec).await {
                Ok(None) => return Ok(Claim::Acquired(lease)),
                Ok(Some(found)) => found,
                Err(e) => {
                    tracing::warn!(record = %lease.record.short(), error = %e,
                        "postgres lookup failed; trusting redis, which holds the claim");
                    return Ok(Claim::Acquired(lease));
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
                    tracing::warn!(error = %e, "could not re-warm redis");
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
        mut lease: Lease,
        cause: StoreError,
    ) -> Result<Claim, StoreError> {
        match (route.policy.on_redis_unavailable, &self.postgres) {
            (OnRedisUnavailable::Postgres, Some(pg)) => {
                metrics::fallback("redis_unavailable");
                let rec = lease_ref(&lease);
                match (pg.store)
                    .claim(rec, &lease.fingerprint, &lease.token, route.policy.lock_ttl)
                    .await?
                {
                    PgClaim::Acquired { fence } => {
                        lease.home = Home::Postgres;
                        lease.fence = fence;
                        lease.settled = false;
                        Ok(Claim::Acquired(lease))
                    }
                    PgClaim::Held(found) => Ok(found_to_claim(found, &lease.fingerprint)),
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
                match pg.writer.write(record()).await? {
                    WriteOutcome::Written | WriteOutcome::Queued => Ok(Completion::Stored),
                    WriteOutcome::Conflict => Ok(Completion::LeaseLost),
                }
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
                        Ok(Completion::Stored)
                    }
                    (_, Ok(WriteOutcome::Conflict)) if also_in_postgres => {
                        Ok(Completion::LeaseLost)
                    }
                    (result, _) => result,
                }
            }
        }
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

    /// One probe: close the breaker when Redis answers; refresh warmth.
    pub async fn probe(&self) {
        if self.breaker.is_open() {
            if self.redis.ping().await.is_ok() {
                // Whatever was written during the outage is in Postgres only.
                let _ = self.redis.reset_marker().await;
                self.warmth.set_cold();
                self.breaker.close();
                metrics::redis_up(true);
                tracing::info!("redis answers again: claims are back in redis");
            }
            return;
        }
        self.warmth.refresh(&self.redis, self.longest_ttl).await;
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
