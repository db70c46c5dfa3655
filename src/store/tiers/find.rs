//! Finding records without claiming them: what the stores hold for a key (Redis, then
//! Postgres), a key stored under its previous id, and what a Postgres record means for
//! a request (a fresh Redis lease settled with it, and the one place stored records are
//! opened).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::super::lease::Lease;
use super::super::postgres::{Found, RecordRef};
use super::super::redis::slots::slot;
use super::super::redis::Record;
use super::super::StoreError;
use super::settle::binding;
use super::Stores;
use crate::idempotency::{
    Binding, Claim, Expiry, Fingerprint, RecordId, Scope, StoredRecord, StoredResponse,
};
use crate::metrics;
use crate::route::Route;

impl Stores {
    /// What the stores hold for a record now, without claiming it (Redis, then
    /// Postgres); `None` when neither has it.
    pub async fn find(
        &self,
        route: &Route,
        scope: Scope,
        record: RecordId,
        fingerprint: &Fingerprint,
    ) -> Result<Option<Claim<Lease>>, StoreError> {
        let key = self.0.redis.record_key(record);
        if !self.0.breaker.is_open(slot(&key)) {
            if let Record::Known(claim) = self.0.redis.peek(&key, fingerprint).await? {
                let at = Binding { scope, record };
                return Ok(Some(self.known(route, at, fingerprint, claim).await?));
            }
        }
        let Some(pg) = &self.0.postgres else {
            return Ok(None);
        };
        let rec = RecordRef {
            scope,
            id: record,
            route: &route.name,
        };
        let found = pg.lookups.lookup(rec).await?;
        let at = Binding { scope, record };
        found
            .map(|found| self.found_to_claim(found, fingerprint, at))
            .transpose()
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
    ) -> Result<Claim<Lease>, StoreError> {
        let answer = match (self.find(route, old_scope, old_record, &lease.fingerprint())).await {
            Ok(None) => return Ok(Claim::Acquired(lease)),
            Ok(Some(Claim::Completed {
                response,
                remaining,
            })) => {
                // Carry the record over to its new id: later retries find it at once.
                metrics::fallback("previous_id");
                if let Err(e) = lease.complete(&response, Expiry::within(remaining)).await {
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

    /// What Redis said of a key it did not give this request (never `Acquired`): a
    /// stored record opened at `at`, and an "in flight" confirmed
    /// ([`Stores::confirm_in_flight`]) where Redis may hold a lease its holder completed
    /// in Postgres alone (`redis_fill = "on_replay"`) or have lost a stored record (a
    /// slot's quarantine).
    pub(super) async fn known<A>(
        &self,
        route: &Route,
        at: Binding,
        fingerprint: &Fingerprint,
        claim: Claim<A, StoredRecord>,
    ) -> Result<Claim<Lease>, StoreError> {
        let claim = claim.map_acquired(|_| unreachable!("acquired claims are the caller's"));
        match claim.try_map_response(|stored| self.open(stored, at))? {
            // Boxed: rare, and inline it would grow every claim's future.
            // A slot's quarantine: the key may be one Redis lost whose answer
            // Postgres holds, which replays rather than wait the quarantine out.
            c @ Claim::InFlight { .. }
                if self.confirms_in_flight() || self.0.redis.in_quarantine() =>
            {
                Box::pin(self.confirm_in_flight(route, at, fingerprint, c)).await
            }
            other => Ok(other),
        }
    }

    /// With `redis_fill = "on_replay"` (on any replica), a completion leaves its Redis
    /// lease standing until it runs out; during a slot's quarantine Redis answers "in
    /// flight" for every key it lost, stored ones too. Redis' "in flight" is then
    /// confirmed in Postgres, which replays the record if the holder completed (Redis is
    /// re-warmed by the first claim after the lease ran out); otherwise `in_flight`
    /// stands.
    async fn confirm_in_flight(
        &self,
        route: &Route,
        at: Binding,
        fingerprint: &Fingerprint,
        in_flight: Claim<Lease>,
    ) -> Result<Claim<Lease>, StoreError> {
        let Some(pg) = &self.0.postgres else {
            return Ok(in_flight);
        };
        let rec = RecordRef {
            scope: at.scope,
            id: at.record,
            route: &route.name,
        };
        let asked = Instant::now();
        match pg.lookups.lookup(rec).await {
            Ok(Some(Found::Completed {
                fingerprint: stored,
                response,
                remaining,
            })) => {
                metrics::fallback("in_flight_completed");
                // Counted from Postgres' clock when it answered: never lengthened.
                let found = Found::Completed {
                    fingerprint: stored,
                    response,
                    remaining: remaining.saturating_sub(asked.elapsed()),
                };
                self.found_to_claim(found, fingerprint, at)
            }
            Ok(_) => Ok(in_flight),
            // Unconfirmed, Redis' answer stands: nothing runs, a waiter goes on waiting,
            // and a 409 tells the client to retry.
            Err(e) => {
                tracing::debug!(error = %e, "could not confirm in postgres: in flight");
                Ok(in_flight)
            }
        }
    }

    /// `redis_fill = "on_replay"` ([`super::Durable::fills_on_replay`]).
    pub(super) fn fills_on_replay(&self) -> bool {
        (self.0.postgres.as_ref()).is_some_and(|pg| pg.fills_on_replay())
    }

    /// Redis' "in flight" is confirmed in Postgres
    /// ([`super::Durable::confirms_in_flight`]).
    pub(super) fn confirms_in_flight(&self) -> bool {
        (self.0.postgres.as_ref()).is_some_and(|pg| pg.confirms_in_flight())
    }

    /// Write-through claims ([`super::Durable::decides_holders`]).
    pub(super) fn decides_holders(&self) -> bool {
        (self.0.postgres.as_ref()).is_some_and(|pg| pg.decides_holders())
    }

    /// A record may be completed in Postgres alone
    /// ([`super::Durable::completes_in_postgres`]).
    pub(super) fn completes_in_postgres(&self) -> bool {
        (self.0.postgres.as_ref()).is_some_and(|pg| pg.completes_in_postgres())
    }

    /// Postgres knows this key although Redis did not: settle the fresh Redis lease
    /// (re-warming a completed record with its remaining TTL) and report what it holds.
    pub(super) async fn settle_with_found(
        &self,
        lease: Lease,
        found: Found,
    ) -> Result<Claim<Lease>, StoreError> {
        // Settled here, by hand: re-warmed with the found response, or let go.
        let lease = lease.into_held();
        match found {
            Found::Completed {
                fingerprint,
                response,
                remaining,
            } if fingerprint == lease.fingerprint => {
                metrics::fallback(match lease.after_lapse {
                    true => "lapsed_completed",
                    false => "cold_lookup_hit",
                });
                // Re-warmed with the bytes Postgres holds: the tiers stay identical.
                let stored = response.to_bytes();
                let response = match self.open(response, binding(&lease)) {
                    Ok(response) => response,
                    Err(e) => {
                        // Never replayed, never re-run: free the key in Redis, so that
                        // every retry meets the same record and the same answer.
                        self.let_go(&lease).await;
                        return Err(e);
                    }
                };
                tracing::info!(key_hash = %lease.record.short(), "replaying from postgres; re-warming redis");
                let (key, token) = (&lease.redis_key, &lease.token);
                if !(self.rewarm(key, token, stored, remaining, &fingerprint)).await {
                    // Not re-warmed: let the key go in Redis now rather than leave our lease
                    // to answer "in flight" for lock_ttl; the next claim looks up again.
                    self.let_go(&lease).await;
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
                self.let_go(&lease).await;
                self.found_to_claim(other, &lease.fingerprint, binding(&lease))
            }
        }
    }

    /// Completes `token`'s lease of `key` with the bytes Postgres holds, so that the
    /// tiers stay identical; false (logged) if Redis did not answer.
    pub(super) async fn rewarm(
        &self,
        key: &str,
        token: &str,
        stored: Bytes,
        remaining: Duration,
        fingerprint: &Fingerprint,
    ) -> bool {
        let warmed = (self.0.redis).complete(key, token, stored, remaining, fingerprint);
        match warmed.await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "could not re-warm redis");
                false
            }
        }
    }

    /// What a Postgres record means for a request with `fingerprint`; a completed one
    /// is opened at `at`.
    pub(super) fn found_to_claim(
        &self,
        found: Found,
        fingerprint: &Fingerprint,
        at: Binding,
    ) -> Result<Claim<Lease>, StoreError> {
        Ok(match found {
            Found::Completed {
                fingerprint: stored,
                response,
                remaining,
            } if stored == *fingerprint => Claim::Completed {
                response: self.open(response, at)?,
                remaining,
            },
            Found::Leased {
                fingerprint: stored,
                remaining,
            } if stored == *fingerprint => Claim::InFlight { remaining },
            _ => Claim::Mismatch,
        })
    }

    /// The one place stored records are opened (see [`crate::idempotency::sealed`]).
    pub(super) fn open(
        &self,
        stored: StoredRecord,
        at: Binding,
    ) -> Result<StoredResponse, StoreError> {
        Ok(self.0.sealing.open(stored, at)?)
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
