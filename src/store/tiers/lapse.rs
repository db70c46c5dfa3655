//! Leases that end without an answer: a release in every tier, and a vouched lease that
//! ran out with no completion, taken over: what Postgres knows of it before it counts as
//! an unknown outcome (its holder may have completed in Postgres alone, filling Redis on
//! replay), and how such a takeover lets the key go without forgetting that it lapsed.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use super::super::lease::{Held, Lease};
use super::super::postgres::Found;
use super::super::redis::{Acquired, Lapsed, OnLapsed};
use super::super::StoreError;
use super::arbitrate::Ask;
use super::find::aged;
use super::settle::{lease_ref, retry_redis};
use super::Stores;
use crate::idempotency::{Claim, Home, Release, StoredRecord};
use crate::metrics;
use crate::route::Route;

/// What a claim that found a lapsed lease does next ([`Stores::lapsed`]): answered from
/// Postgres (or failed), nothing of it written; or what Redis answered its claim again,
/// which took the lapsed lease over (Postgres holds nothing for the key).
pub(super) type Lapse = ControlFlow<
    Result<Claim<Lease>, StoreError>,
    Result<Claim<Acquired, StoredRecord>, StoreError>,
>;

impl Stores {
    /// Releases a lease in every tier that holds it.
    pub(crate) async fn release(&self, lease: &Held) -> Result<Release, StoreError> {
        let rec = lease_ref(lease);
        match (lease.home, &self.0.postgres) {
            (Home::Postgres, Some(pg)) => pg.store.release(rec, &lease.token).await,
            // A takeover of a lapsed lease Redis keeps alone (its caller gone, its call
            // failed) stays a lapsed lease, so the next claim learns of the lapse too.
            (
                Home::Redis {
                    also_in_postgres: false,
                },
                _,
            ) if lease.after_lapse => retry_redis(None, || self.end_lapsed(lease)).await,
            (Home::Redis { also_in_postgres }, pg) => {
                let released = retry_redis(None, || {
                    self.0.redis.release(&lease.redis_key, &lease.token)
                })
                .await;
                if let (true, Some(pg)) = (also_in_postgres, pg) {
                    pg.store.release(rec, &lease.token).await?;
                }
                released
            }
            (Home::Postgres, None) => Ok(Release::NotHeld),
        }
    }

    /// A vouched claim found `lapsed`: a lease that ran out with no completion in Redis,
    /// not taken over yet. Its holder may have completed in Postgres alone (filling
    /// Redis on replay): Postgres is asked first. A completed record replays and
    /// re-warms Redis under the lapsed holder's token (nothing of this claim is written,
    /// so nothing of it can be lost); what else Postgres holds answers as it does;
    /// nothing there takes the lease over, as an unknown outcome (or a run again where
    /// the route allows it), or as a fresh claim once any record of it would have
    /// expired ([`Stores::take_over`]). If Postgres cannot say,
    /// the claim fails closed and the key stays as it was.
    pub(super) async fn lapsed(
        &self,
        route: &Route,
        ask: &Ask,
        lapsed: Lapsed,
        fence_ttl: Duration,
    ) -> Lapse {
        let Some(pg) = &self.0.postgres else {
            return ControlFlow::Continue(self.take_over(route, ask, lapsed, fence_ttl).await);
        };
        let at = ask.binding();
        let asked = Instant::now();
        let found = match pg.lookups.lookup(ask.rec(route)).await {
            Ok(Some(found)) => aged(found, asked),
            Ok(None) => {
                return ControlFlow::Continue(self.take_over(route, ask, lapsed, fence_ttl).await)
            }
            Err(e) => {
                metrics::fallback("lookup_failed");
                return ControlFlow::Break(Err(StoreError::LookupFailed(Box::new(e))));
            }
        };
        ControlFlow::Break(match found {
            Found::Completed {
                fingerprint,
                response,
                remaining,
            } if fingerprint == ask.fingerprint => {
                metrics::fallback("lapsed_completed");
                let stored = response.to_bytes();
                let response = match self.open(response, at) {
                    Ok(response) => response,
                    Err(e) => return ControlFlow::Break(Err(e)),
                };
                // Completes the lapsed lease in place (`lua/complete.lua`), unless another
                // claim took it over meanwhile; the answer stands either way.
                let (key, holder) = (&ask.redis_key, &lapsed.holder);
                (self.rewarm(key, holder, stored, remaining, &fingerprint)).await;
                Ok(Claim::Completed {
                    response,
                    remaining,
                })
            }
            other => self.found_to_claim(other, &ask.fingerprint, at),
        })
    }

    /// Takes `lapsed` over (nothing in Postgres), and only that lease: a fresh claim if
    /// it is over for at least the route's `ttl` less its `lock_ttl`. A holder completes
    /// within `lock_ttl` before its lease ends, so from then on its record may have
    /// expired, and Postgres' "nothing" may say that rather than that the holder went
    /// away: a lapse is remembered for `ttl` from the holder's last heartbeat, and a key
    /// past its `ttl` runs afresh, as a completed one does.
    async fn take_over(
        &self,
        route: &Route,
        ask: &Ask,
        lapsed: Lapsed,
        fence_ttl: Duration,
    ) -> Result<Claim<Acquired, StoredRecord>, StoreError> {
        let settings = &route.policy.settings;
        let holder = OnLapsed::TakeOver(&lapsed.holder);
        let taken = (self.claim_in_redis(route, ask, fence_ttl, holder)).await;
        taken.map(|claim| match claim {
            // Another holder's lease lapsed meanwhile (ours was taken over, and its
            // taker's ran out): not asked about, so in flight for this claim.
            Claim::Acquired(Acquired {
                lapsed: Some(_), ..
            }) => Claim::InFlight {
                remaining: Duration::ZERO,
            },
            Claim::Acquired(mut acquired)
                if lapsed.over_for >= settings.ttl.saturating_sub(settings.lock_ttl) =>
            {
                acquired.after_lapse = false;
                Claim::Acquired(acquired)
            }
            other => other,
        })
    }

    /// Ends a fresh Redis lease that will not run: released, so that the next claim
    /// takes the key at once; or, if it took over a lapsed one, left lapsed (its lease
    /// ended now, the record kept as long as a lapsed lease is), so that the next claim
    /// still knows the key may have run.
    pub(super) async fn let_go(&self, held: &Held) {
        let ended = match held.after_lapse {
            false => self.0.redis.release(&held.redis_key, &held.token).await,
            true => self.end_lapsed(held).await,
        };
        if let Err(e) = ended {
            tracing::debug!(key_hash = %held.record.short(), error = %e,
                "could not end the lease; it runs out");
        }
    }

    /// Ends `held`, a takeover of a lapsed lease that Redis keeps alone, as a lapsed
    /// lease: its lease ends now and its record stays for as long as a lapsed lease's
    /// does (a heartbeat of no time, `lua/extend.lua`).
    pub(super) async fn end_lapsed(&self, held: &Held) -> Result<Release, StoreError> {
        let ended = (self.0.redis)
            .extend(
                &held.redis_key,
                &held.token,
                Duration::ZERO,
                &held.fingerprint,
                held.fence,
            )
            .await?;
        Ok(if ended {
            Release::Released
        } else {
            Release::NotHeld
        })
    }
}
