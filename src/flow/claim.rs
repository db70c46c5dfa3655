//! Phase 3, claim: a completed record this replica has seen is answered from memory;
//! otherwise the key is claimed in the stores ([`Stores::claim`]), waited for while
//! another request holds it (`in_flight = "wait"`), and, while ids move to a new scope
//! secret, looked up under its previous id. What the claim comes to is a held lease,
//! an answer, or a bypass ([`Claimed`]). A waiting duplicate whose key's answer streams
//! live joins it ([`live::join`]).
//!
//! A record whose fingerprint differs is compared again under the route's previous
//! fingerprint policy, when it has one ([`Identified::previous`], hashed only then): a
//! record stored before the policy changed replays for a retry that matches it under
//! the rules it was stored by ([`under_previous_policy`]).
//!
//! [`Stores::claim`]: crate::store::Stores::claim

use std::net::IpAddr;
use std::sync::Arc;

use super::identify::{scope_of, Identified};
use super::live::{self, join::Source, resume::Resume};
use super::refused::{unreadable, Refused, Reply};
use crate::app::App;
use crate::budget::ByteBudget;
use crate::config::InFlightPolicy;
use crate::idempotency::{Claim, Fingerprint, RecordId, ResendableRequest, StoredResponse};
use crate::metrics::Outcome;
use crate::route::Route;
use crate::store::tiers::{Resendable, Waited};
use crate::store::{Failure, Lease, StoreError};
use crate::telemetry::context::{self, in_span, phase};
use axum::response::Response;

/// What claiming a key came to.
pub enum Claimed {
    /// This request holds the key: run it ([`super::run()`]).
    Acquired(Lease),
    /// No store could take the claim: forward without idempotency.
    Bypassed,
    /// Answered without running: a replay, a refusal.
    Answered(Outcome, Reply),
}

/// What the claim keeps for the completer: the request, encoded, on a route with it.
fn resendable(completer: bool, request: &Identified, peer: IpAddr) -> Resendable {
    if !completer {
        return Resendable::Off;
    }
    let mut kept = ResendableRequest::new(&request.parts, &request.body, peer);
    // Where spans are exported, the kept request names this call (its claim's span) as
    // its `traceparent`: the completer's span links to it.
    if let Some(this) = context::current_traceparent(context::is_traced(&request.parts.extensions))
    {
        kept.headers
            .retain(|(name, _)| name != context::TRACEPARENT);
        kept.headers.push((context::TRACEPARENT, this));
    }
    Resendable::Fresh(kept.encode())
}

/// Claims the key of `request` (sent by `peer`) on `route`.
pub async fn claim(
    app: &Arc<App>,
    route: &Arc<Route>,
    request: &Identified,
    peer: IpAddr,
) -> Claimed {
    if let Some(answered) = cached(app, route, request) {
        return answered;
    }
    let settings = &route.policy.settings;
    let (scope, record, fingerprint) = (request.scope, request.record, &request.fingerprint);
    // The branches a first execution does not take are boxed (waiting, the previous
    // id): inline, the largest of them sets the size of this future, and of
    // every future that holds it, which is moved (copied) several times per request.
    let resend = resendable(settings.completer, request, peer);
    // What the tiers answer is cached only if this replica's view of them holds
    // until then (see `Stores::replay_view`).
    let view = app.stores.replay_view();
    let claimed = (app.stores).claim(route, scope, record, fingerprint, resend.clone());
    let claim = match claimed.await {
        Ok(Claim::InFlight { remaining }) if settings.in_flight == InFlightPolicy::Wait => {
            let waited = (app.stores).wait(route, scope, record, fingerprint, remaining, resend);
            let span = context::is_traced(&request.parts.extensions).then(|| phase!("wait"));
            // A replica that stops ends its waits once only the settling part of its
            // grace is left: the duplicate is answered "in flight" (left the waiters).
            // Dropping the wait mid-claim is safe: a claim runs on a task of its own,
            // and a lease nobody takes releases itself.
            let waited = tokio::select! {
                waited = Box::pin(async { in_span!(span, waited) }) => waited,
                () = app.calls.cancelled() => Ok(Waited::Claim(Claim::InFlight { remaining })),
            };
            match waited {
                Ok(Waited::Claim(claim)) => Ok(claim),
                Ok(Waited::Joined(joined)) => {
                    let source = Source {
                        scope,
                        record,
                        fingerprint: *fingerprint,
                    };
                    let parts = &request.parts;
                    let budget = parts.extensions.get::<Arc<ByteBudget>>();
                    let resume = Resume::from_request(&parts.headers, budget);
                    match live::join::reply(app, route, source, joined, resume) {
                        Some(joined) => return Claimed::Answered(Outcome::Replayed, Ok(joined)),
                        None => Ok(Claim::InFlight { remaining }),
                    }
                }
                Err(e) => Err(e),
            }
        }
        other => other,
    };
    let claim = match claim {
        Ok(Claim::Acquired(lease)) => under_previous_id(app, route, request, lease).await,
        claim => claim,
    };
    match claim {
        Ok(Claim::Acquired(lease)) => Claimed::Acquired(lease),
        Ok(Claim::Completed {
            response,
            remaining,
        }) => {
            let replay = replay(route, request, &response);
            app.stores
                .remember(record, *fingerprint, &response, remaining, view);
            Claimed::Answered(Outcome::Replayed, Ok(replay))
        }
        Ok(Claim::InFlight { remaining }) => {
            Claimed::Answered(Outcome::InFlight, Err(Refused::InFlight(remaining)))
        }
        Ok(Claim::Mismatch) => match request.previous(route) {
            Some(previous) => Box::pin(under_previous_policy(app, route, request, previous)).await,
            None => mismatch(route),
        },
        Ok(Claim::Bypassed) => Claimed::Bypassed,
        Err(e) => failed(e),
    }
}

/// A stored answer replayed to `request`: from after its `Last-Event-ID` when it sends
/// one and the answer is an event stream ([`Resume`]).
fn replay(route: &Route, request: &Identified, stored: &StoredResponse) -> Response {
    let omit = &route.policy.replay_omit;
    let resumed = Resume::from_request(&request.parts.headers, None).and_then(|r| r.stored(stored));
    match resumed {
        Some(resumed) => resumed.replay(omit),
        None => stored.replay(omit),
    }
}

fn mismatch(route: &Route) -> Claimed {
    let refused = Refused::Mismatch(route.policy.settings.mismatch_status);
    Claimed::Answered(Outcome::Mismatch, Err(refused))
}

/// The record did not match this request's fingerprint; it may have been stored before
/// the route's fingerprint policy changed: it answers if it matches `previous`, the
/// request's fingerprint under the previous policy (a replay, or in flight: never a
/// wait or a claim, so a lease is only ever taken under the current policy).
async fn under_previous_policy(
    app: &App,
    route: &Route,
    request: &Identified,
    previous: Fingerprint,
) -> Claimed {
    let found = (app.stores).find(route, request.scope, request.record, &previous);
    match found.await {
        Ok(Some(Claim::Completed { response, .. })) => {
            Claimed::Answered(Outcome::Replayed, Ok(replay(route, request, &response)))
        }
        Ok(Some(Claim::InFlight { remaining })) => {
            Claimed::Answered(Outcome::InFlight, Err(Refused::InFlight(remaining)))
        }
        Err(e) => failed(e),
        // Gone since (expired, released), or no match under either policy: the answer
        // the current policy gave.
        Ok(_) => mismatch(route),
    }
}

/// A completed record this replica has seen never changes: answer from memory.
fn cached(app: &App, route: &Route, request: &Identified) -> Option<Claimed> {
    let settings = &route.policy.settings;
    let hit = app.stores.cached(request.record)?;
    let matches = hit.fingerprint == request.fingerprint
        || (request.previous(route)).is_some_and(|previous| hit.fingerprint == previous);
    let (outcome, reply) = if matches {
        (Outcome::Replayed, Ok(replay(route, request, &hit.response)))
    } else {
        let refused = Refused::Mismatch(settings.mismatch_status);
        (Outcome::Mismatch, Err(refused))
    };
    Some(Claimed::Answered(outcome, reply))
}

/// Upgrading to a scope secret: the key may be stored under its old id (only while
/// `previous` is set; otherwise the lease as acquired).
async fn under_previous_id(
    app: &App,
    route: &Route,
    request: &Identified,
    lease: Lease,
) -> Result<Claim<Lease>, StoreError> {
    let Some(previous) = &app.scope_keys.previous else {
        return Ok(Claim::Acquired(lease));
    };
    let old = scope_of(route, &request.parts.headers, previous.as_ref())
        .map(|scope| (scope, RecordId::new(scope, &request.key, previous.as_ref())));
    match old {
        Ok((old_scope, old_record)) => {
            let found = (app.stores).under_previous_id(route, lease, old_scope, old_record);
            Box::pin(found).await
        }
        Err(_) => Ok(Claim::Acquired(lease)),
    }
}

/// The claim failed: nothing was forwarded.
fn failed(e: StoreError) -> Claimed {
    if e.unreadable().is_some() {
        unreadable(&e);
    } else {
        tracing::warn!(error = %e,
            "claim failed; answering without forwarding");
    }
    let outcome = match e.failure() {
        Failure::Unavailable => Outcome::StoreUnavailable,
        Failure::Internal => Outcome::Rejected,
    };
    Claimed::Answered(outcome, Err(Refused::Store(e)))
}
