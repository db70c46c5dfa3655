//! Running a held lease: the upstream call (with the fencing token, under the lease's
//! heartbeat) and settling the lease with its outcome: stored (a stored problem for an
//! upstream that may have acted), released, or lost to another holder. A client's
//! request ([`gateway`](super::gateway)) and the completer's attempt at an abandoned one
//! ([`crate::completer`]) run the same code ([`Runner`]).

use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::HeaderValue;

use super::gateway::{unreadable, COMPLETER, FENCING_TOKEN};
use super::problem::Problem;
use crate::app::App;
use crate::config::OnAmbiguous;
use crate::idempotency::{Claim, Completion, StoredResponse};
use crate::metrics::{self, Outcome};
use crate::proxy::headers::Peer;
use crate::proxy::UpstreamError;
use crate::route::Route;
use crate::store::lease::Phase;
use crate::store::Lease;

/// Who runs a held lease's request: a client's request, or the completer sending an
/// abandoned one again. They differ only in what an upstream call that got no answer,
/// or a release status, leaves: a client's lease is released (its retry runs again);
/// the completer's is handed back with its kept request, for its next attempt (the
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

/// Runs the upstream call for a client's held lease and settles the lease with its outcome.
pub(super) async fn execute(
    app: Arc<App>,
    route: Arc<Route>,
    lease: Lease,
    parts: Parts,
    body: Bytes,
    peer: std::net::IpAddr,
) -> (Outcome, Response) {
    let (outcome, response, _) = run(app, route, lease, parts, body, peer, Runner::Client).await;
    (outcome, response)
}

/// Runs the upstream call for a held lease and settles the lease with its outcome, as
/// `runner` does ([`Runner`]).
pub async fn run(
    app: Arc<App>,
    route: Arc<Route>,
    lease: Lease,
    parts: Parts,
    body: Bytes,
    peer: std::net::IpAddr,
    runner: Runner,
) -> (Outcome, Response, Settled) {
    let _in_flight = route.metrics.in_flight();
    let max_response = app.config.server.max_response_body.as_u64();
    let mut parts = parts;
    parts
        .headers
        .insert(FENCING_TOKEN, HeaderValue::from(lease.fence()));
    if runner == Runner::Completer {
        parts
            .headers
            .insert(COMPLETER, HeaderValue::from_static("1"));
    }
    let started = Instant::now();
    let peer = Peer::new(peer, &app.config.server.trusted_proxies);
    let forward = (app.upstream).forward_buffered(&route, parts, body, peer, max_response);
    let answer = lease.heartbeat(pin!(forward), Phase::Upstream).await;
    route.metrics.upstream(started);
    let stored = match answer {
        Ok(answer) if route.policy.releases(answer.status) => {
            match runner {
                Runner::Client => Box::pin(release(lease)).await,
                Runner::Completer => Box::pin(hand_back(lease)).await,
            }
            let response =
                StoredResponse::from_upstream(answer.status, &answer.headers, answer.body);
            let response = response.to_response(false);
            return (Outcome::UpstreamError, response, Settled::Released);
        }
        Ok(answer) => {
            let mut stored =
                StoredResponse::from_upstream(answer.status, &answer.headers, answer.body);
            let first = stored.to_response(false);
            if !route.policy.settings.replay_set_cookie {
                // The first client gets its cookies; they are not stored, so never replayed.
                stored.remove_set_cookie();
            }
            return settle(&app, &route, lease, stored, first).await;
        }
        Err(e @ UpstreamError::ResponseTooLarge(_)) => {
            // The upstream acted; a retry must not run it again. Store the problem instead.
            tracing::warn!(error = %e,
                "upstream response too large to store; storing a 502 problem for this key");
            Problem::from(&e).to_stored()
        }
        Err(e) if e.is_ambiguous() && route.policy.settings.on_ambiguous == OnAmbiguous::Store => {
            // The upstream may have acted: answer every retry with the same "unknown".
            tracing::warn!(error = %e,
                "upstream outcome unknown; storing it for this key (on_ambiguous = store)");
            Problem::outcome_unknown(&e).to_stored()
        }
        Err(e) if runner == Runner::Completer => {
            tracing::warn!(error = %e,
                "upstream call failed; the completer tries again after its backoff");
            Box::pin(hand_back(lease)).await;
            let problem = Problem::from(&e).into_response();
            return (Outcome::UpstreamError, problem, Settled::Failed);
        }
        Err(e) => {
            tracing::warn!(error = %e,
                "upstream call failed; releasing the key");
            Box::pin(release(lease)).await;
            let problem = Problem::from(&e).into_response();
            return (Outcome::UpstreamError, problem, Settled::Failed);
        }
    };
    let first = stored.to_response(false);
    settle(&app, &route, lease, stored, first).await
}

/// Completes the lease with `stored` and answers `first` (what this execution's client
/// gets), unless the lease was lost: then the key's outcome is someone else's.
async fn settle(
    app: &Arc<App>,
    route: &Route,
    lease: Lease,
    stored: StoredResponse,
    first: Response,
) -> (Outcome, Response, Settled) {
    let (record, scope, lease_fingerprint) = (lease.record(), lease.scope(), lease.fingerprint());
    let view = lease.view();
    // Encoded once: Redis, Postgres and the replay cache all keep this encoding.
    let encoded = stored.encoded();
    match lease
        .complete_encoded(&encoded, route.policy.settings.ttl)
        .await
    {
        Ok(Completion::Stored) => {
            route.metrics.stored_bytes(encoded.bytes.len());
            // Not if this replica's view of Redis changed since the claim (a breaker
            // that closed, a failover): the tier that now answers may hold another.
            (app.stores).remember_encoded(
                record,
                lease_fingerprint,
                encoded,
                route.policy.settings.ttl,
                view,
            );
        }
        Ok(Completion::LeaseLost) => {
            metrics::lease_lost();
            tracing::warn!(
                "lease lost before completion: another execution holds this key; \
                answering with its outcome, not ours"
            );
            // Every retry gets the other execution's outcome: so does this client.
            // Boxed: rare, and inline it would grow every execution's future.
            let found = Box::pin((app.stores).find(route, scope, record, &lease_fingerprint)).await;
            let (outcome, response) = match found {
                Ok(Some(Claim::Completed { response, .. })) => (
                    Outcome::Replayed,
                    response.replay(route.policy.settings.replay_set_cookie),
                ),
                Err(e) if e.unreadable().is_some() => {
                    unreadable(&e);
                    (Outcome::Rejected, Problem::from(&e).into_response())
                }
                _ => (
                    Outcome::InFlight,
                    Problem::superseded(route.policy.settings.lock_ttl).into_response(),
                ),
            };
            return (outcome, response, Settled::LeaseLost);
        }
        Err(e) => {
            tracing::error!(error = %e,
                "could not store the response; a retry after the lease expires will run again");
            return (Outcome::Executed, first, Settled::NotStored);
        }
    }
    (Outcome::Executed, first, Settled::Stored)
}

/// Boxed where `execute` calls it: ~8 KiB (fred's command future) that a first
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
