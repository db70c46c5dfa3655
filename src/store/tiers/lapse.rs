//! Leases that end without an answer: a release in every tier, and a vouched lease that
//! ran out with no completion, taken over: what Postgres knows of it before it counts as
//! an unknown outcome (its holder may have completed in Postgres alone, filling Redis on
//! replay), and how such a takeover lets the key go without forgetting that it lapsed.

use std::time::{Duration, Instant};

use super::super::lease::{Held, Lease};
use super::super::postgres::Found;
use super::super::StoreError;
use super::settle::{lease_ref, retry_redis};
use super::Stores;
use crate::idempotency::{Claim, Home, Release};
use crate::metrics;

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

    /// Redis gave `lease` over one that lapsed with no completion in Redis. A holder
    /// that filled on replay completed in Postgres alone and left its lease there to run
    /// out: Postgres is asked first. A completed record replays and re-warms Redis;
    /// nothing in Postgres leaves the takeover as it is (an unknown outcome, or a run
    /// again where the route allows it). If Postgres cannot say, the claim fails closed
    /// and the key stays lapsed for the next claim to ask again.
    pub(super) async fn after_lapse(&self, lease: Lease) -> Result<Claim<Lease>, StoreError> {
        let Some(pg) = &self.0.postgres else {
            return Ok(Claim::Acquired(lease));
        };
        let asked = Instant::now();
        match pg.lookups.lookup(lease_ref(&lease)).await {
            Ok(None) => Ok(Claim::Acquired(lease)),
            Ok(Some(found)) => self.settle_with_found(lease, aged(found, asked)).await,
            Err(e) => {
                metrics::fallback("lookup_failed");
                let held = lease.into_held();
                self.let_go(&held).await;
                Err(StoreError::LookupFailed(Box::new(e)))
            }
        }
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

/// `found` as of now: a completed record's time left, which Postgres counted from its
/// statement's clock when it was `asked`, shortened by the time since (never
/// lengthened: a re-warmed record must not outlive its expiry).
pub(super) fn aged(found: Found, asked: Instant) -> Found {
    match found {
        Found::Completed {
            fingerprint,
            response,
            remaining,
        } => Found::Completed {
            fingerprint,
            response,
            remaining: remaining.saturating_sub(asked.elapsed()),
        },
        other => other,
    }
}
