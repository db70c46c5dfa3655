//! The proxied-traffic handler: the numbered request flow of the idempotency layer.
//!
//! route -> method covered? -> key -> bounded body -> scope, record, fingerprint ->
//! claim -> (acquired) forward and record in a detached task | replay | 409 | mismatch.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::problem::Problem;
use super::AppState;
use crate::app::App;
use crate::idempotency::{
    key, Claim, Completion, Fingerprint, KeyError, Lease, RecordId, Scope, StoredResponse,
};
use crate::proxy::UpstreamError;
use crate::route::Route;

/// Marks a response forwarded without idempotency because no store could take the claim.
pub const IDEMPOTENCY_STATUS: HeaderName = HeaderName::from_static("idempotency-status");

/// Entry point for every request on the proxy listener.
pub async fn handle(
    State(AppState(app)): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let Some(route) = app.routes.find(request.uri().path()).cloned() else {
        return Problem::no_route(request.uri().path().len()).into_response();
    };
    let policy = &route.policy;
    if !policy.covers(request.method()) {
        return pass_through(&app, &route, request, peer).await;
    }
    let key = match key::extract(
        request.headers(),
        &policy.key_headers,
        policy.max_key_length,
    ) {
        Ok(Some(key)) => key,
        Ok(None) if policy.required => {
            let header = policy.key_headers[0].to_string();
            return Problem::from(KeyError::Missing(header)).into_response();
        }
        Ok(None) => return pass_through(&app, &route, request, peer).await,
        Err(e) => return Problem::from(e).into_response(),
    };

    let (parts, body) = request.into_parts();
    let limit = app.config.server.max_request_body.as_u64();
    let body = match read_bounded(&parts, body, limit).await {
        Ok(body) => body,
        Err(problem) => return problem.into_response(),
    };
    let scope = Scope::new(&route.name, parts.headers.get(&policy.scope_header));
    let record = RecordId::new(scope, &key);
    let fingerprint = Fingerprint::new(
        &parts.method,
        &parts.uri,
        parts.headers.get(CONTENT_TYPE),
        &body,
    );

    match app.stores.claim(&route, scope, record, &fingerprint).await {
        Ok(Claim::Acquired(lease)) => {
            // Detached: a client that goes away must not cancel the upstream call or the
            // recording of its result.
            let task = app
                .tasks
                .spawn(execute(app.clone(), route, lease, parts, body, peer.ip()));
            task.await.unwrap_or_else(|e| {
                Problem::internal(format!("request task failed: {e}")).into_response()
            })
        }
        Ok(Claim::Completed(stored)) => stored.to_response(true),
        Ok(Claim::InFlight { remaining }) => Problem::in_flight(remaining).into_response(),
        Ok(Claim::Mismatch) => Problem::mismatch(policy.mismatch_status).into_response(),
        Ok(Claim::Bypassed) => {
            let request = Request::from_parts(parts, Body::from(body));
            let mut response = pass_through(&app, &route, request, peer).await;
            response
                .headers_mut()
                .insert(IDEMPOTENCY_STATUS, HeaderValue::from_static("bypassed"));
            response
        }
        Err(e) => {
            tracing::warn!(route = %route.name, record = %record.short(), error = %e,
                "claim failed; answering 503 without forwarding");
            Problem::from(&e).into_response()
        }
    }
}

/// Reads the whole body, refusing more than `limit` bytes (declared or actual).
async fn read_bounded(parts: &Parts, body: Body, limit: u64) -> Result<Bytes, Problem> {
    let declared = (parts.headers.get(CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(Problem::body_too_large(limit));
    }
    match Limited::new(body, limit as usize).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(Problem::body_too_large(limit))
        }
        Err(e) => Err(Problem::body_unreadable(e)),
    }
}

/// Runs the upstream call for a held lease and settles the lease with its outcome.
async fn execute(
    app: Arc<App>,
    route: Arc<Route>,
    lease: Lease,
    parts: Parts,
    body: Bytes,
    peer: std::net::IpAddr,
) -> Response {
    let record = lease.record();
    let max_response = app.config.server.max_response_body.as_u64();
    let stored = match app
        .upstream
        .forward_buffered(&route, parts, body, peer, max_response)
        .await
    {
        Ok(answer) if route.policy.releases(answer.status) => {
            release(lease, &route).await;
            return StoredResponse::from_upstream(answer.status, &answer.headers, answer.body)
                .to_response(false);
        }
        Ok(answer) => StoredResponse::from_upstream(answer.status, &answer.headers, answer.body),
        Err(e @ UpstreamError::ResponseTooLarge(_)) => {
            // The upstream acted; a retry must not run it again. Store the problem instead.
            tracing::warn!(route = %route.name, record = %record.short(), error = %e,
                "upstream response too large to store; storing a 502 problem for this key");
            Problem::from(&e).to_stored()
        }
        Err(e) => {
            tracing::warn!(route = %route.name, record = %record.short(), error = %e,
                "upstream call failed; releasing the key");
            release(lease, &route).await;
            return Problem::from(&e).into_response();
        }
    };
    match lease.complete(&stored, route.policy.ttl).await {
        Ok(Completion::Stored) => {}
        Ok(Completion::LeaseLost) => tracing::warn!(route = %route.name, record = %record.short(),
            "lease lost before completion: another request holds this key; not overwriting it"),
        Err(e) => tracing::error!(route = %route.name, record = %record.short(), error = %e,
            "could not store the response; a retry after the lease expires will run again"),
    }
    stored.to_response(false)
}

async fn release(lease: Lease, route: &Route) {
    let record = lease.record();
    if let Err(e) = lease.release().await {
        tracing::warn!(route = %route.name, record = %record.short(), error = %e,
            "could not release the key; it frees itself when the lease expires");
    }
}

/// Forwards a request that the idempotency layer does not cover, without touching Redis.
async fn pass_through(app: &App, route: &Route, request: Request, peer: SocketAddr) -> Response {
    let (parts, body) = request.into_parts();
    match app
        .upstream
        .forward_streaming(route, parts, body, peer.ip())
        .await
    {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(route = %route.name, error = %e, "upstream call failed");
            Problem::from(&e).into_response()
        }
    }
}
