//! The proxied-traffic handler: the numbered request flow of the idempotency layer.
//!
//! (headers sanitised, path canonical) -> route -> method covered? -> key -> bounded
//! body -> scope, record, fingerprint -> claim -> (acquired) forward and record in a
//! detached task | replay | 409 | mismatch.
//! Every keyed request ends in one [`Outcome`], counted and logged once, here.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tracing::Instrument;

use super::budget::{ByteBudget, Metered, OverBudget};
use super::problem::Problem;
use super::AppState;
use crate::app::App;
use crate::config::{AnonymousScope, InFlightPolicy, OnAmbiguous};
use crate::idempotency::{
    key, Claim, Completion, Fingerprint, KeptRequest, KeyError, RecordId, Scope, ScopeError,
    ScopeSecret, StoredResponse,
};
use crate::metrics::{self, Outcome};
use crate::proxy::headers::{self, Peer};
use crate::proxy::UpstreamError;
use crate::route::Route;
use crate::store::heartbeat::Phase;
use crate::store::tiers::Kept;
use crate::store::{Failure, Lease, StoreError};

/// Marks a response forwarded without idempotency because no store could take the claim.
pub const IDEMPOTENCY_STATUS: HeaderName = HeaderName::from_static("idempotency-status");
/// Grows with every acquisition of a key, so an upstream can refuse a stale holder.
pub const FENCING_TOKEN: HeaderName = HeaderName::from_static("idempotency-fencing-token");
/// Correlates a request across client, gateway logs and upstream.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Marks a request the completer sent again (docs/completer.md).
pub const COMPLETER: HeaderName = HeaderName::from_static("idempotency-completer");

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

/// What one request came to, for the metrics and the log line.
#[derive(Default)]
struct Trace {
    route: Option<Arc<Route>>,
    outcome: Option<Outcome>,
    scope: Option<Scope>,
    record: Option<RecordId>,
    /// `record.short()`, when the span needed it.
    key_hash: Option<String>,
}

/// Entry point for every request on the proxy listener.
pub async fn handle(
    State(AppState(app)): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
) -> Response {
    let started = Instant::now();
    // Before anything reads or adds a header: a client can neither set a header only
    // the gateway sets nor, through `Connection`, remove one the gateway adds.
    headers::sanitize_incoming(request.headers_mut());
    let request_id = request_id(request.headers().get(&X_REQUEST_ID));
    request
        .headers_mut()
        .insert(X_REQUEST_ID, request_id.clone());
    let mut trace = Trace::default();
    // The request's span: every line logged for it, by any layer (claim, stores,
    // upstream), carries these fields under the same names.
    let span = tracing::info_span!(
        "request",
        request_id = request_id.to_str().unwrap_or(""),
        route = tracing::field::Empty,
        key_hash = tracing::field::Empty,
    );
    let mut response = match crate::route::path::canonicalize(request.uri_mut()) {
        Ok(()) => {
            (serve(&app, peer, request, &mut trace))
                .instrument(span.clone())
                .await
        }
        Err(e) => {
            trace.outcome = Some(Outcome::Rejected);
            Problem::invalid_path(e).into_response()
        }
    };
    response
        .headers_mut()
        .insert(X_REQUEST_ID, request_id.clone());

    let route = trace
        .route
        .as_ref()
        .map_or("_unmatched", |r| r.name.as_str());
    match (&trace.route, trace.outcome) {
        (Some(r), Some(outcome)) => r.metrics.request(outcome, started),
        (Some(r), None) => r.metrics.unkeyed(),
        (None, _) => metrics::unmatched(started),
    }
    tracing::info!(
        request_id = request_id.to_str().unwrap_or(""),
        route,
        outcome = trace.outcome.map_or("unkeyed", Outcome::as_str),
        status = response.status().as_u16(),
        // Whole microseconds, so the number prints as written (0.102, not
        // 0.10200300000000001): shorter to format, and to read.
        duration_ms = started.elapsed().as_micros() as f64 / 1000.0,
        key_hash = match (trace.key_hash.take(), trace.record) {
            (Some(short), _) => short,
            (None, record) => record.map(RecordId::short).unwrap_or_default(),
        },
        scope_hash = trace.scope.map(Scope::to_hex).unwrap_or_default(),
        "request"
    );
    response
}

/// The client's `X-Request-Id` when it is sane (1 to 128 visible ASCII), else a new one.
fn request_id(given: Option<&HeaderValue>) -> HeaderValue {
    given
        .filter(|v| (1..=128).contains(&v.len()) && v.as_bytes().iter().all(u8::is_ascii_graphic))
        .cloned()
        .unwrap_or_else(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            HeaderValue::from_str(&id).expect("hex is a valid header value")
        })
}

async fn serve(app: &Arc<App>, peer: SocketAddr, request: Request, trace: &mut Trace) -> Response {
    let Some(route) = app.routes.find(request.uri().path()).cloned() else {
        trace.outcome = Some(Outcome::Rejected);
        return Problem::no_route(request.uri().path().len()).into_response();
    };
    trace.route = Some(route.clone());
    tracing::Span::current().record("route", route.name.as_str());
    let policy = &route.policy;
    if !policy.covers(request.method()) {
        return pass_through(app, &route, request, peer).await;
    }
    let key = match key::extract(
        request.headers(),
        &policy.key_headers,
        policy.settings.max_key_length,
    ) {
        Ok(Some(key)) => key,
        Ok(None) if policy.settings.required => {
            trace.outcome = Some(Outcome::MissingKey);
            let header = policy.key_headers[0].to_string();
            return Problem::from(KeyError::Missing(header)).into_response();
        }
        Ok(None) => return pass_through(app, &route, request, peer).await,
        Err(e) => {
            trace.outcome = Some(Outcome::InvalidKey);
            return Problem::from(e).into_response();
        }
    };

    let secret = app.scope_keys.current.as_ref();
    let scope = match scope_of(&route, request.headers(), secret) {
        Ok(scope) => scope,
        Err(e) => {
            trace.outcome = Some(Outcome::Rejected);
            return Problem::from(e).into_response();
        }
    };

    let (parts, body) = request.into_parts();
    let body = match read_bounded(app, &parts, body).await {
        Ok(body) => body,
        Err(problem) => {
            trace.outcome = Some(Outcome::Rejected);
            return problem.into_response();
        }
    };
    let record = RecordId::new(scope, &key, secret);
    (trace.scope, trace.record) = (Some(scope), Some(record));
    // Made once, and only when something records it (the span, then the log line).
    let span = tracing::Span::current();
    if !span.is_disabled() {
        let short = record.short();
        span.record("key_hash", short.as_str());
        trace.key_hash = Some(short);
    }
    let fingerprint = Fingerprint::new(
        &parts.method,
        &parts.uri,
        parts.headers.get(CONTENT_TYPE),
        &body,
    );

    // A completed record this replica has seen never changes: answer from memory.
    if let Some(hit) = app.stores.cached(record) {
        let (outcome, response) = if hit.fingerprint == fingerprint {
            (
                Outcome::Replayed,
                hit.response.replay(policy.settings.replay_set_cookie),
            )
        } else {
            let problem = Problem::mismatch(policy.settings.mismatch_status);
            (Outcome::Mismatch, problem.into_response())
        };
        trace.outcome = Some(outcome);
        return response;
    }
    // The branches a first execution does not take are boxed (waiting, the previous
    // id): inline, the largest of them sets the size of this future, and of
    // every future that holds it, which is moved (copied) several times per request.
    let kept = match policy.settings.completer {
        true => Kept::Request(KeptRequest::new(&parts, &body, peer.ip()).encode()),
        false => Kept::Nothing,
    };
    let claimed = (app.stores).claim(&route, scope, record, &fingerprint, kept.clone());
    let claim = match claimed.await {
        Ok(Claim::InFlight { remaining }) if policy.settings.in_flight == InFlightPolicy::Wait => {
            let waited = (app.stores).wait(&route, scope, record, &fingerprint, remaining, kept);
            Box::pin(waited).await
        }
        other => other,
    };
    let claim = match (claim, &app.scope_keys.previous) {
        (Ok(Claim::Acquired(lease)), Some(previous)) => {
            // Upgrading to a scope secret: the key may be stored under its old id.
            let old = scope_of(&route, &parts.headers, previous.as_ref())
                .map(|scope| (scope, RecordId::new(scope, &key, previous.as_ref())));
            match old {
                Ok((old_scope, old_record)) => {
                    let found =
                        (app.stores).under_previous_id(&route, lease, old_scope, old_record);
                    Box::pin(found).await
                }
                Err(_) => Ok(Claim::Acquired(lease)),
            }
        }
        (claim, _) => claim,
    };
    let (outcome, response) = match claim {
        Ok(Claim::Acquired(lease)) => {
            // Detached: a client that goes away must not cancel the upstream call or the
            // recording of its result.
            // Boxed: the future is KiBs, and spawning, polling to completion and
            // joining a task move it (and its output slot, as large) several times over;
            // a box moves as a pointer.
            let run = Box::pin(execute(
                app.clone(),
                route.clone(),
                lease,
                parts,
                body,
                peer.ip(),
            ));
            let task = (app.tasks).spawn(run.in_current_span());
            task.await.unwrap_or_else(|e| {
                // The detail (a panic message) is for the log, not for the client.
                tracing::error!(error = %e, "request task failed");
                let problem = Problem::internal("the request failed inside the gateway");
                (Outcome::UpstreamError, problem.into_response())
            })
        }
        Ok(Claim::Completed {
            response,
            remaining,
        }) => {
            let replay = response.replay(policy.settings.replay_set_cookie);
            app.stores
                .remember(record, fingerprint, &response, remaining);
            (Outcome::Replayed, replay)
        }
        Ok(Claim::InFlight { remaining }) => (
            Outcome::InFlight,
            Problem::in_flight(remaining).into_response(),
        ),
        Ok(Claim::Mismatch) => (
            Outcome::Mismatch,
            Problem::mismatch(policy.settings.mismatch_status).into_response(),
        ),
        Ok(Claim::Bypassed) => {
            let request = Request::from_parts(parts, Body::from(body));
            let mut response = pass_through(app, &route, request, peer).await;
            (response.headers_mut())
                .insert(IDEMPOTENCY_STATUS, HeaderValue::from_static("bypassed"));
            (Outcome::Bypassed, response)
        }
        Err(e) => {
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
            (outcome, Problem::from(&e).into_response())
        }
    };
    trace.outcome = Some(outcome);
    response
}

/// Reads the whole body within `server.body_read_timeout`, refusing more than
/// `server.max_request_body` bytes (declared or actual). What a refused body still
/// brings is read and discarded after the answer ([`super::linger`]).
///
/// The body is charged to `server.buffer_budget` (when the server set one) before
/// anything is claimed: its declared length up front, the rest as it arrives; one
/// that does not fit, or any request once the budget is spent, gets 503 `overloaded`.
/// The charge travels inside the returned bytes ([`super::limits`]).
async fn read_bounded(app: &App, parts: &Parts, body: Body) -> Result<Bytes, Problem> {
    let limit = app.config.server.max_request_body.as_u64();
    let declared = (parts.headers.get(CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(Problem::body_too_large(limit));
    }
    let charge = match parts.extensions.get::<Arc<ByteBudget>>() {
        Some(budget) => Some(
            budget
                .try_take(declared.unwrap_or(0))
                .ok_or_else(Problem::overloaded_buffers)?,
        ),
        None => None,
    };
    let mut body = Metered::new(body, charge);
    let deadline = app.config.server.body_read_timeout;
    let read = Limited::new(&mut body, limit as usize).collect();
    match tokio::time::timeout(deadline, read).await {
        Err(_) => Err(Problem::body_timeout(deadline)),
        Ok(Ok(collected)) => Ok(body.seal(collected.to_bytes())),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(Problem::body_too_large(limit))
        }
        Ok(Err(e)) if e.downcast_ref::<OverBudget>().is_some() => {
            Err(Problem::overloaded_buffers())
        }
        Ok(Err(e)) => Err(Problem::body_unreadable(e)),
    }
}

/// Runs the upstream call for a client's held lease and settles the lease with its outcome.
async fn execute(
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
    // Encoded once: Redis, Postgres and the replay cache all keep this encoding.
    let encoded = stored.encoded();
    match lease
        .complete_encoded(&encoded, route.policy.settings.ttl)
        .await
    {
        Ok(Completion::Stored) => {
            route.metrics.stored_bytes(encoded.bytes.len());
            (app.stores).remember_encoded(
                record,
                lease_fingerprint,
                encoded,
                route.policy.settings.ttl,
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

/// A stored record that cannot be read: counted and logged once, here (the span names
/// the record by `key_hash`). It is not replayed and not re-run.
fn unreadable(e: &StoreError) {
    let reason = e.unreadable().unwrap_or("corrupt");
    metrics::unreadable(reason);
    tracing::error!(error = %e, reason,
        "the stored response for this key cannot be read: answering 500 \
        stored_record_unreadable until it expires or an admin invalidates it");
}

/// The request's tenant scope under `secret`, or why it has none.
fn scope_of(
    route: &Route,
    headers: &http::HeaderMap,
    secret: Option<&ScopeSecret>,
) -> Result<Scope, ScopeError> {
    let names = &route.policy.settings.scope_headers;
    match Scope::from_headers(&route.name, headers, names, secret)? {
        Some(scope) => Ok(scope),
        None if route.policy.settings.anonymous == AnonymousScope::Shared => {
            Ok(Scope::anonymous(&route.name, names, secret))
        }
        None => Err(ScopeError::Missing(
            names
                .iter()
                .map(HeaderName::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
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

/// Forwards a request without idempotency, and without touching any store.
async fn pass_through(app: &App, route: &Route, request: Request, peer: SocketAddr) -> Response {
    let (parts, body) = request.into_parts();
    let peer = Peer::new(peer.ip(), &app.config.server.trusted_proxies);
    match app
        .upstream
        .forward_streaming(route, parts, body, peer)
        .await
    {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(error = %e, "upstream call failed");
            Problem::from(&e).into_response()
        }
    }
}
