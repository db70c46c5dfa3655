//! Phase 5, settle: how a held lease ends ([`Settled`]) and what the request is
//! answered: completed with the response to store (unless the lease was lost: then the
//! key's outcome is another execution's), released after a release status or a call
//! without an answer, or handed back to the completer ([`Runner`]).

use std::sync::Arc;

use axum::response::Response;

use super::refused::{unreadable, Refused, Reply};
use crate::app::App;
use crate::idempotency::{Claim, Completion, Expiry, Fingerprint, RecordId, Scope, StoredResponse};
use crate::metrics::{self, Outcome};
use crate::proxy::{Buffered, UpstreamError};
use crate::route::Route;
use crate::store::Lease;

/// Who runs a held lease's request: a client's request, or the completer sending an
/// abandoned one again. They differ only in what an upstream call that got no answer,
/// or a release status, leaves: a client's lease is released (its retry runs again);
/// the completer's is handed back with its resendable request, for its next attempt (the
/// key is just as free for a client's retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    Client,
    Completer,
}

/// How a held lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// A response is stored for the key (the upstream's, or a stored problem).
    Stored,
    /// The upstream answered a release status: the key is free (the completer's kept
    /// request stays for its next attempt).
    Released,
    /// No answer from the upstream: released (a client) or handed back (the completer).
    Failed,
    /// Another execution holds the key now.
    LeaseLost,
    /// The response could not be stored.
    NotStored,
}

/// Completes the lease with `stored`, kept until `expiry`, and answers `first` (what
/// this execution's client gets), unless the lease was lost: then the key's outcome is
/// someone else's.
pub async fn complete(
    app: &Arc<App>,
    route: &Route,
    lease: Lease,
    stored: StoredResponse,
    first: Response,
    expiry: Expiry,
) -> (Outcome, Reply, Settled) {
    let (record, scope, lease_fingerprint) = (lease.record(), lease.scope(), lease.fingerprint());
    let view = lease.view();
    // Encoded once: Redis, Postgres and the replay cache all keep this encoding.
    let encoded = stored.encoded();
    match lease.complete_encoded(&encoded, expiry).await {
        Ok(Completion::Stored) => {
            route.metrics.stored_bytes(encoded.bytes.len());
            // Not if this replica's view of Redis changed since the claim (a breaker
            // that closed, a failover): the tier that now answers may hold another.
            (app.stores).remember_encoded(
                record,
                lease_fingerprint,
                encoded,
                expiry.remaining(),
                view,
            );
        }
        Ok(Completion::LeaseLost) => {
            // Boxed: rare, and inline it would grow every execution's future.
            let lost = lease_lost(app, route, scope, record, lease_fingerprint);
            let (outcome, reply) = Box::pin(lost).await;
            return (outcome, reply, Settled::LeaseLost);
        }
        Err(e) => {
            tracing::error!(error = %e,
                "could not store the response; once the lease expires a retry runs the key \
                again, or, where postgres holds leases, stores it as an unknown outcome");
            // The first answer keeps its expiry: a tier may hold the record after all (a
            // write-through that landed while Redis failed), and a replay of it must be
            // the same bytes.
            return (Outcome::Executed, Ok(first), Settled::NotStored);
        }
    }
    (Outcome::Executed, Ok(first), Settled::Stored)
}

/// The lease was lost before completion: every retry gets the other execution's
/// outcome, and so does this client.
async fn lease_lost(
    app: &App,
    route: &Route,
    scope: Scope,
    record: RecordId,
    fingerprint: Fingerprint,
) -> (Outcome, Reply) {
    metrics::lease_lost();
    tracing::warn!(
        "lease lost before completion: another execution holds this key; \
        answering with its outcome, not ours"
    );
    match (app.stores).find(route, scope, record, &fingerprint).await {
        Ok(Some(Claim::Completed { response, .. })) => (
            Outcome::Replayed,
            Ok(response.replay(&route.policy.replay_omit)),
        ),
        Err(e) if e.unreadable().is_some() => {
            unreadable(&e);
            (Outcome::Rejected, Err(Refused::Store(e)))
        }
        _ => (
            Outcome::InFlight,
            Err(Refused::Superseded(route.policy.settings.lock_ttl)),
        ),
    }
}

/// The upstream answered a release status: the key is freed (a client's lease
/// released, the completer's handed back) and the answer passed on, not stored.
pub async fn released(lease: Lease, answer: Buffered, runner: Runner) -> (Outcome, Reply, Settled) {
    match runner {
        Runner::Client => Box::pin(release(lease)).await,
        Runner::Completer => Box::pin(hand_back(lease)).await,
    }
    let response = StoredResponse::from_upstream(answer.status, &answer.headers, answer.body)
        .with_trailers(answer.trailers.as_ref());
    let response = response.to_response(false);
    (Outcome::UpstreamError, Ok(response), Settled::Released)
}

/// The upstream call got no answer worth storing: the key is freed for a retry (a
/// client's lease released, the completer's handed back for its next attempt).
pub async fn failed(lease: Lease, e: UpstreamError, runner: Runner) -> (Outcome, Reply, Settled) {
    match runner {
        Runner::Completer => {
            tracing::warn!(error = %e,
                "upstream call failed; the completer tries again after its backoff");
            Box::pin(hand_back(lease)).await;
        }
        Runner::Client => {
            tracing::warn!(error = %e,
                "upstream call failed; releasing the key");
            Box::pin(release(lease)).await;
        }
    }
    (
        Outcome::UpstreamError,
        Err(Refused::Upstream(e)),
        Settled::Failed,
    )
}

/// Boxed where it is called: ~8 KiB (fred's command future) that a first
/// execution would otherwise carry inline.
async fn release(lease: Lease) {
    if let Err(e) = lease.release().await {
        tracing::warn!(error = %e,
            "could not release the key; it frees itself when the lease expires");
    }
}

/// The completer's attempt did not settle the key: its lease ends now, the request
/// kept for the next attempt.
async fn hand_back(lease: Lease) {
    if let Err(e) = lease.hand_back().await {
        tracing::warn!(error = %e, "could not hand the lease back; it expires");
    }
}
