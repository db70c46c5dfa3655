//! The vocabulary of claiming a key: what a claim found ([`Claim`]), how a completion
//! or a release ended, and where a lease lives. The lease guard itself belongs to the
//! stores (`store::lease`), which hold and settle it.
//!
//! [`Claim`] is decoded from the claim script's reply in exactly one place
//! (`store::redis`), and from a Postgres row in one place (`store::postgres`).

use std::time::Duration;

use super::stored::StoredResponse;

/// What the stores said about a (scope, key) when this request tried to claim it.
/// `L` is what an acquired claim carries: the stores' lease guard, or what one store
/// decoded (a fencing token). `R` is the stored response: as a store read it (a
/// `StoredRecord`, maybe sealed), or opened.
#[derive(Debug)]
pub enum Claim<L, R = StoredResponse> {
    /// This request holds the lease and must run the upstream call.
    Acquired(L),
    /// A response is stored for the same fingerprint: replay it. It lives `remaining` more.
    Completed { response: R, remaining: Duration },
    /// Another request holds the lease for `remaining`.
    InFlight { remaining: Duration },
    /// The key was used with a different request.
    Mismatch,
    /// No store can take the claim and the route's policy is `pass_through`:
    /// forward without idempotency.
    Bypassed,
}

impl<L, R> Claim<L, R> {
    /// Replaces the acquired payload, keeping every other outcome.
    pub fn map_acquired<M>(self, f: impl FnOnce(L) -> M) -> Claim<M, R> {
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

    /// Replaces the stored response (opening it), keeping every other outcome.
    pub fn try_map_response<S, E>(
        self,
        f: impl FnOnce(R) -> Result<S, E>,
    ) -> Result<Claim<L, S>, E> {
        Ok(match self {
            Claim::Completed {
                response,
                remaining,
            } => Claim::Completed {
                response: f(response)?,
                remaining,
            },
            Claim::Acquired(l) => Claim::Acquired(l),
            Claim::InFlight { remaining } => Claim::InFlight { remaining },
            Claim::Mismatch => Claim::Mismatch,
            Claim::Bypassed => Claim::Bypassed,
        })
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
