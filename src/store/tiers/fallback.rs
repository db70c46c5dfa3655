//! Claims while Redis is unavailable: the route's `on_redis_unavailable` policy, which
//! claims in Postgres with the same semantics, forwards without idempotency, or refuses.

use super::super::lease::Lease;
use super::super::postgres::claim_asks::ClaimAsk;
use super::super::postgres::PgClaim;
use super::super::redis::slots::slot;
use super::super::StoreError;
use super::arbitrate::{row_life, Ask};
use super::Stores;
use crate::config::OnRedisUnavailable;
use crate::idempotency::{Claim, Home};
use crate::metrics;
use crate::route::Route;

impl Stores {
    /// Redis is unavailable: apply the route's policy.
    pub(super) async fn fallback(
        &self,
        route: &Route,
        ask: Ask,
        cause: StoreError,
    ) -> Result<Claim<Lease>, StoreError> {
        let policy = route.policy.settings.on_redis_unavailable;
        // Redis may hold leases Postgres never saw once the deployment's epoch markers are
        // recorded (no claim is kept by Redis alone before): in every mode, since a fleet
        // may mix them. Before that, as on a Redis that never fsynced every write, vouched
        // claims were all written through and move to Postgres as write-through ones do.
        let alone = match (policy, &self.0.postgres) {
            (OnRedisUnavailable::Postgres, Some(_)) => self.0.redis.may_hold_alone().await,
            _ => false,
        };
        match (policy, &self.0.postgres) {
            (OnRedisUnavailable::Postgres, Some(pg)) if alone => {
                Box::pin(self.answer_without_redis(pg, route, ask, cause)).await
            }
            (OnRedisUnavailable::Postgres, Some(pg)) => {
                metrics::fallback("redis_unavailable");
                // Redis will lack this record: its slot is cold until its marker is reset.
                self.0.warmth.set_cold(slot(&ask.redis_key));
                let rec = ask.rec(route);
                let lock_ttl = route.policy.settings.lock_ttl;
                let claim = ClaimAsk::new(rec, &ask.fingerprint, &ask.token, lock_ttl)
                    .living(row_life(route))
                    .resending(self.resend_row(route, &ask));
                let claimed = pg.claims.claim_ask(claim).await?;
                match claimed {
                    PgClaim::Acquired { fence, after_lapse } => {
                        let lease = self.lease(route, ask, Home::Postgres, fence, after_lapse);
                        Ok(Claim::Acquired(lease))
                    }
                    PgClaim::Held(found) => {
                        self.found_to_claim(found, &ask.fingerprint, ask.binding())
                    }
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
}
