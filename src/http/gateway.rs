//! The proxied-traffic handler: the numbered request flow of the idempotency layer.
//!
//! (headers sanitised, path canonical) -> route -> method covered? -> key -> bounded
//! body -> scope, record, fingerprint -> claim -> (acquired) forward and record in a
//! detached task ([`super::execute`]) | replay | 409 | mismatch.
//! Every keyed request ends in one [`Outcome`], counted and logged once, here.

use std::net::SocketAddr;
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

use super::problem::Problem;
use super::AppState;
use crate::app::App;
use crate::config::{AnonymousScope, InFlightPolicy};
use crate::idempotency::{
    key, Claim, Fingerprint, KeptRequest, KeyError, RecordId, Scope, ScopeError, ScopeSecret,
};
use crate::metrics::{self, Outcome};
use crate::proxy::headers::{self, Peer};
use crate::route::Route;
use crate::server::layers::budget::{ByteBudget, Metered, OverBudget};
use crate::store::tiers::Kept;
use crate::store::{Failure, StoreError};

/// Marks a response forwarded without idempotency because no store could take the claim.
pub const IDEMPOTENCY_STATUS: HeaderName = HeaderName::from_static("idempotency-status");
/// Grows with every acquisition of a key, so an upstream can refuse a stale holder.
pub const FENCING_TOKEN: HeaderName = HeaderName::from_static("idempotency-fencing-token");
/// Correlates a request across client, gateway logs and upstream.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Marks a request the completer sent again (docs/completer.md).
pub const COMPLETER: HeaderName = HeaderName::from_static("idempotency-completer");

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
    // What the tiers answer is cached only if this replica's view of them holds
    // until then (see `Stores::replay_view`).
    let view = app.stores.replay_view();
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
            let run = Box::pin(super::execute::execute(
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
                .remember(record, fingerprint, &response, remaining, view);
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
/// brings is read and discarded after the answer ([`crate::server::layers::linger`]).
///
/// The body is charged to `server.buffer_budget` (when the server set one) before
/// anything is claimed: its declared length up front, the rest as it arrives; one
/// that does not fit, or any request once the budget is spent, gets 503 `overloaded`.
/// The charge travels inside the returned bytes ([`crate::server::layers::budget`]).
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

/// A stored record that cannot be read: counted and logged once, here (the span names
/// the record by `key_hash`). It is not replayed and not re-run.
pub(super) fn unreadable(e: &StoreError) {
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
