//! The claim phase: take a key (in Redis, else by policy in Postgres), and check what
//! Postgres knows when Redis may have forgotten. Waiting for an in-flight holder is in
//! [`wait`](super::wait), finding records without claiming them in [`find`](super::find).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::lease::{Held, Lease};
use super::super::postgres::claim_asks::{ClaimAsk, ResendableRow};
use super::super::postgres::{PgClaim, RecordRef};
use super::super::redis::slots::{slot, Slotted};
use super::super::redis::vouch::Vouched;
use super::super::redis::{Acquired, OnLapsed};
use super::super::StoreError;
use super::find::aged;
use super::settle::lease_ref;
use super::Stores;
use crate::config::ClaimDurability;
use crate::idempotency::{Binding, Claim, Fingerprint, Home, RecordId, Scope, StoredRecord};
use crate::metrics;
use crate::route::Route;

impl Stores {
    /// Claims (scope, key) for a request on `route`.
    ///
    /// The lease belongs to the gateway, not to the caller's connection: the claim runs
    /// as a task of its own, so a caller that goes away while the claim is on its way
    /// (a client timeout, a reset) cannot strand a lease that landed. Its [`Claim`] is
    /// then dropped with nobody to take it, and a dropped [`Lease`] releases itself.
    ///
    /// `resend` is what the lease keeps for the completer (a route with `completer = true`
    /// and write-through claims): a first execution's request, or the completer's own
    /// takeover of an abandoned one, which is this very claim, as a retry's is.
    pub async fn claim(
        &self,
        route: &Arc<Route>,
        scope: Scope,
        record: RecordId,
        fingerprint: &Fingerprint,
        resend: Resendable,
    ) -> Result<Claim<Lease>, StoreError> {
        let (stores, route, fingerprint) = (self.clone(), route.clone(), *fingerprint);
        let claim = async move {
            stores
                .claim_here(&route, scope, record, fingerprint, resend)
                .await
        };
        // Boxed: a task's future is moved on spawn and its slot again on completion.
        tokio::spawn(crate::telemetry::dispatch::carry(Box::pin(claim)))
            .await
            .unwrap_or_else(|e| Err(StoreError::ClaimTask(e)))
    }

    /// The claim itself; runs to the end once started (see [`Stores::claim`]).
    pub(super) async fn claim_here(
        &self,
        route: &Route,
        scope: Scope,
        record: RecordId,
        fingerprint: Fingerprint,
        resend: Resendable,
    ) -> Result<Claim<Lease>, StoreError> {
        let ask = Ask {
            view: self.replay_view(),
            redis_key: self.0.redis.record_key(record),
            token: uuid::Uuid::new_v4().simple().to_string(),
            scope,
            record,
            fingerprint,
            resend,
        };
        // The fallback is boxed: rare, and inline it would grow the future of every
        // claim, which is moved several times on its way through the task.
        let key = Slotted::new(&ask.redis_key);
        let slot = key.slot;
        if self.0.breaker.any_open() && self.0.breaker.is_open(slot) {
            return Box::pin(self.fallback(route, ask, StoreError::RedisDown)).await;
        }
        let (write_through, fence_ttl) = self.fencing(&route.policy);
        let claimed = (self.claim_in_redis(route, &ask, fence_ttl, OnLapsed::Ask)).await;
        if claimed.is_ok() {
            self.0.breaker.answered(slot);
        }
        let claimed = match claimed {
            // Boxed: rare, and inline it would grow every claim's future.
            Ok(Claim::Acquired(Acquired {
                lapsed: Some(lapsed),
                ..
            })) => match Box::pin(self.lapsed(route, &ask, lapsed, fence_ttl)).await {
                ControlFlow::Break(answer) => return answer,
                ControlFlow::Continue(claimed) => claimed,
            },
            other => other,
        };
        match claimed {
            Ok(Claim::Acquired(acquired)) => {
                let home = Home::Redis {
                    also_in_postgres: false,
                };
                let through = written_through(acquired.vouched, write_through);
                let pg_row = through.then(|| self.resend_row(route, &ask));
                // Postgres may yet say it follows a lapsed lease (`after_redis_acquire`),
                // if Redis did not (a vouched record outlives its lease).
                let lease = self.lease(route, ask, home, acquired.fence, acquired.after_lapse);
                self.after_redis_acquire(route, lease, acquired.marker_age, pg_row)
                    .await
            }
            Ok(other) => {
                let at = Binding { scope, record };
                self.known(route, at, &fingerprint, other).await
            }
            Err(e @ StoreError::Unavailable(_)) => {
                // Not cold by itself: only a claim the fallback takes in Postgres
                // leaves Redis lacking a record (its slot is marked there).
                self.trip(slot, &e);
                Box::pin(self.fallback(route, ask, e)).await
            }
            // A Redis that answers with an error (OOM, READONLY...) or slowly is still
            // the authority: this request fails, claims stay in Redis; unless its shard
            // has answered nothing at all for a while (see `breaker`).
            Err(e @ StoreError::Timeout) => {
                self.timed_out(slot, &e);
                Err(e)
            }
            Err(e) => {
                self.0.breaker.answered(slot);
                Err(e)
            }
        }
    }

    /// The claim script for `ask`, doing with a lapsed lease what `lapsed` says.
    pub(super) async fn claim_in_redis(
        &self,
        route: &Route,
        ask: &Ask,
        fence_ttl: Duration,
        lapsed: OnLapsed<'_>,
    ) -> Result<Claim<Acquired, StoredRecord>, StoreError> {
        let key = Slotted::new(&ask.redis_key);
        let leases = (route.policy.settings.lock_ttl, fence_ttl);
        // A request kept for the completer lives in its Postgres row: such a claim is
        // written through, whatever Redis could vouch for.
        let keep_alone = matches!(ask.resend, Resendable::Off);
        let (fp, token) = (&ask.fingerprint, &ask.token);
        (self.0.redis)
            .claim(key, fp, token, leases, keep_alone, lapsed)
            .await
    }

    /// Whether the mode writes every claim through, and the ttl of the Redis fence key:
    /// write-through claims take their fencing token from Postgres (see
    /// `after_redis_acquire`), so they keep no fence key in Redis (a zero ttl).
    fn fencing(&self, policy: &crate::route::Policy) -> (bool, Duration) {
        let write_through = (self.0.postgres.as_ref())
            .is_some_and(|pg| pg.durability == ClaimDurability::WriteThrough);
        if write_through {
            (true, Duration::ZERO)
        } else {
            (false, policy.settings.ttl + policy.settings.lock_ttl)
        }
    }

    /// What the durable lease of `ask` keeps for the completer: its request sealed at
    /// its record (a first execution on a route with the completer on), or the kept
    /// request as stored (the completer's takeover).
    pub(super) fn resend_row(&self, route: &Route, ask: &Ask) -> Option<ResendableRow> {
        let (request, by_completer) = match &ask.resend {
            Resendable::Off => return None,
            Resendable::Fresh(encoded) => {
                (self.0.sealing.seal_request(encoded, ask.binding()), false)
            }
            Resendable::TakenOver(stored) => (stored.clone(), true),
        };
        Some(ResendableRow {
            request,
            lives: route.policy.settings.ttl + route.policy.settings.lock_ttl,
            by_completer,
        })
    }

    /// A held lease, unsettled from here on: it must be completed or released.
    /// `after_lapse`: the store that issued `fence` took it over from a lapsed lease.
    pub(super) fn lease(
        &self,
        route: &Route,
        ask: Ask,
        home: Home,
        fence: i64,
        after_lapse: bool,
    ) -> Lease {
        Lease::new(Held {
            stores: self.clone(),
            home,
            redis_key: ask.redis_key,
            token: ask.token,
            route: route.name.clone(),
            lock_ttl: route.policy.settings.lock_ttl,
            scope: ask.scope,
            record: ask.record,
            fingerprint: ask.fingerprint,
            fence,
            after_lapse,
            view: ask.view,
            claimed_at: std::time::Instant::now(),
            runs_out_ms: u64::try_from(route.policy.settings.lock_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .into(),
            live: false,
        })
    }

    /// Redis said Acquired: make sure Postgres does not know better. `pg_row`: the
    /// claim is written through (a Postgres row decides), with what it keeps for the
    /// completer; `None`: Redis holds it alone and Postgres is only asked for a record
    /// Redis may have forgotten.
    async fn after_redis_acquire(
        &self,
        route: &Route,
        mut lease: Lease,
        marker_age: Duration,
        pg_row: Option<Option<ResendableRow>>,
    ) -> Result<Claim<Lease>, StoreError> {
        let Some(pg) = &self.0.postgres else {
            return Ok(Claim::Acquired(lease));
        };
        let rec = lease_ref(&lease);
        // What Postgres answers is counted from now ([`aged`]).
        let asked = Instant::now();
        let found = if let Some(resend) = pg_row {
            let lock_ttl = route.policy.settings.lock_ttl;
            let ask = ClaimAsk::new(rec, &lease.fingerprint, &lease.token, lock_ttl)
                .living(row_life(route));
            match pg.claims.claim_ask(ask.resending(resend)).await {
                Ok(PgClaim::Acquired { fence, after_lapse }) => {
                    // Postgres' fence is the authority here: every forwarded
                    // write-through claim holds a Postgres row, and its fence grows
                    // per key (previous + 1, at least Postgres' clock in µs), across
                    // Redis' fallback too (also Postgres'). Redis keeps no fence key.
                    lease.set_fence(fence, after_lapse);
                    lease.set_home(Home::Redis {
                        also_in_postgres: true,
                    });
                    return Ok(Claim::Acquired(lease));
                }
                Ok(PgClaim::Held(found)) => found,
                Err(e) => {
                    // The stricter mode promises a durable claim before forwarding.
                    let _ = lease.release().await;
                    return Err(e);
                }
            }
        } else if self
            .0
            .warmth
            .must_lookup(marker_age, slot(&lease.redis_key))
        {
            match pg.lookups.lookup(rec).await {
                Ok(None) => return Ok(Claim::Acquired(lease)),
                Ok(Some(found)) => found,
                Err(e) if self.0.warmth.vouches(marker_age, slot(&lease.redis_key)) => {
                    tracing::warn!(key_hash = %lease.record.short(), error = %e,
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
        // Boxed, as the fallback is: rare paths must not grow every claim's future.
        Box::pin(self.settle_with_found(lease, aged(found, asked))).await
    }
}

/// Whether a claim Redis acquired is written through to Postgres: from Redis' verdict
/// (counted), or from the mode where it asks none.
fn written_through(vouched: Vouched, mode: bool) -> bool {
    match vouched {
        Vouched::NotAsked => mode,
        Vouched::Kept => {
            metrics::claim_vouch("kept");
            false
        }
        Vouched::Unvouched(why) => {
            metrics::claim_vouch(why);
            true
        }
    }
}

/// What a claim is about, before any store holds anything for it.
pub(super) struct Ask {
    /// The replay cache's view when the claim started ([`Stores::replay_view`]).
    view: u64,
    pub(super) redis_key: String,
    pub(super) token: String,
    pub(super) scope: Scope,
    pub(super) record: RecordId,
    pub(super) fingerprint: Fingerprint,
    pub(super) resend: Resendable,
}

impl Ask {
    /// Where the claim's record stands (scope and id): what its answer is sealed to.
    pub(super) fn binding(&self) -> Binding {
        Binding {
            scope: self.scope,
            record: self.record,
        }
    }

    /// The claim's record in Postgres, on `route`.
    pub(super) fn rec<'a>(&self, route: &'a Route) -> RecordRef<'a> {
        RecordRef {
            scope: self.scope,
            id: self.record,
            route: &route.name,
        }
    }
}

/// What a claim keeps with its durable lease so that the completer can send the request
/// again (write-through claims only: nothing is kept where a claim lives in Redis alone).
#[derive(Debug, Clone, Default)]
pub enum Resendable {
    /// Nothing: a route without the completer.
    #[default]
    Off,
    /// A first execution's request: its [`crate::idempotency::ResendableRequest`]
    /// encoding, sealed before it is stored.
    Fresh(bytes::Bytes),
    /// The completer taking an abandoned request over: the request as stored (sealed).
    TakenOver(bytes::Bytes),
}

/// How long past its lease a claimed Postgres row lives: the record's `ttl`, from the
/// latest its completion can come (the call's `upstream_deadline`, and its expiry rounded
/// up to a whole second), so that the completion never moves the row's indexed expiry
/// and stays a HOT update. The record is replayed only to its own expiry
/// (`replay_until`); this only decides when the reaper may delete the row.
pub(super) fn row_life(route: &Route) -> Duration {
    let settings = &route.policy.settings;
    let late = route.upstream_deadline.saturating_sub(settings.lock_ttl);
    settings.ttl + late + Duration::from_secs(2)
}
