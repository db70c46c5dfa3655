//! The outcome of claiming a key, and the lease a winner holds until it settles.
//!
//! [`Claim`] is decoded from the claim script's reply in exactly one place
//! ([`crate::store::RedisStore::claim`]), and from a Postgres row in one place
//! (`store::postgres`). A [`Lease`] is a guard: it must be completed with a response
//! or released; one dropped unsettled releases itself in the background.

use std::time::Duration;

use super::fingerprint::{Fingerprint, RecordId};
use super::replay::StoredResponse;
use super::scope::Scope;
use crate::store::{StoreError, Stores};

/// What the stores said about a (scope, key) when this request tried to claim it.
/// `L` is what an acquired claim carries: a [`Lease`], or `()` inside one store.
#[derive(Debug)]
pub enum Claim<L = Lease> {
    /// This request holds the lease and must run the upstream call.
    Acquired(L),
    /// A response is stored for the same fingerprint: replay it. It lives `remaining` more.
    Completed {
        response: StoredResponse,
        remaining: Duration,
    },
    /// Another request holds the lease for `remaining`.
    InFlight { remaining: Duration },
    /// The key was used with a different request.
    Mismatch,
    /// No store can take the claim and the route's policy is `pass_through`:
    /// forward without idempotency.
    Bypassed,
}

impl<L> Claim<L> {
    /// Replaces the acquired payload, keeping every other outcome.
    pub fn map_acquired<M>(self, f: impl FnOnce(L) -> M) -> Claim<M> {
        match self {
            Claim::Acquired(l) => Claim::Acquired(f(l)),
            Claim::Completed {
                response,
                remaining,
            } => Claim::Completed {
                response,
                remaining,
            },
            Claim::InFlight { remaining } => Claim::InFlight { remaining },
            Claim::Mismatch => Claim::Mismatch,
            Claim::Bypassed => Claim::Bypassed,
        }
    }
}

/// The result of completing a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The response is stored and will be replayed.
    Stored,
    /// The lease had been taken over by another request; nothing was overwritten.
    LeaseLost,
}

/// The result of releasing a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The record is gone; a retry runs again.
    Released,
    /// The record was not ours any more (completed or leased by another token).
    NotHeld,
}

/// Where a lease was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    /// In Redis (the normal case); with `postgres.claims = "write_through"` also in Postgres.
    Redis { also_in_postgres: bool },
    /// In Postgres, because Redis was unavailable.
    Postgres,
}

/// A held claim on one record. Settle it with [`Lease::complete`] or [`Lease::release`].
#[derive(Debug)]
pub struct Lease {
    pub(crate) stores: Stores,
    pub(crate) home: Home,
    pub(crate) redis_key: String,
    pub(crate) token: String,
    pub(crate) route: String,
    /// The route's `lock_ttl`: how long the lease lasts without a heartbeat.
    pub(crate) lock_ttl: Duration,
    pub(crate) scope: Scope,
    pub(crate) record: RecordId,
    pub(crate) fingerprint: Fingerprint,
    /// Grows with every acquisition of this key; forwarded as `Idempotency-Fencing-Token`.
    pub(crate) fence: i64,
    pub(crate) settled: bool,
}

impl Lease {
    pub fn record(&self) -> RecordId {
        self.record
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    pub fn home(&self) -> Home {
        self.home
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// Pushes the lease out by `lease` (the heartbeat); false if it is not ours any more.
    pub async fn extend(&self, lease: Duration) -> Result<bool, StoreError> {
        self.stores.extend(self, lease).await
    }

    /// Stores `response` for `ttl` if the lease is still ours (and writes it through
    /// to Postgres when configured).
    pub async fn complete(
        mut self,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Completion, StoreError> {
        self.settled = true;
        self.stores.clone().complete(&self, response, ttl).await
    }

    /// Drops the lease so that a retry runs the request again.
    pub async fn release(mut self) -> Result<Release, StoreError> {
        self.settled = true;
        self.stores.clone().release(&self).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        tracing::warn!(record = %self.record.short(), "lease dropped unsettled; releasing it");
        self.settled = true;
        // The copy that travels to the task counts as settled: if the task is dropped
        // unpolled (a runtime shutting down drops what it is handed), dropping the copy
        // must not spawn again, and again, until the stack overflows.
        let lease = Lease {
            stores: self.stores.clone(),
            redis_key: std::mem::take(&mut self.redis_key),
            token: std::mem::take(&mut self.token),
            route: std::mem::take(&mut self.route),
            settled: true,
            ..*self
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = lease.stores.clone().release(&lease).await;
            });
        }
    }
}
