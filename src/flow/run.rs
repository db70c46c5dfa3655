//! Phase 4, run: the upstream call for a held lease, with the fencing token and under
//! the lease's heartbeat, and what its answer means for the key (stored, a stored
//! problem for an upstream that may have acted, released, handed back), settled in
//! [`super::settle`]. A client's request ([`detached`]) and the completer's attempt at
//! an abandoned one ([`crate::completer`]) run the same code ([`run()`], [`Runner`]).
//! The record's expiry is written into what is stored here ([`stamp`]).
//!
//! A client's call runs on a task of its own, so that neither a client that goes away
//! nor one that has waited the route's `upstream_timeout` cancels it. At that timeout
//! the client is answered 504 `upstream_timeout` (with `Retry-After`) while the call
//! goes on under the key's heartbeated lease, up to the route's `upstream_deadline`;
//! its answer is then stored and replayed to the retries that come after it, and
//! meanwhile they find the key in flight. A [`Watch`] decides, once, which came first:
//! the upstream's answer or the client's timeout ([`super::watch`]). The call keeps
//! the request's `server.max_concurrent_requests` slot until it ends.

use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::HeaderValue;

use tokio::sync::oneshot;

use super::identify::Identified;
use super::live;
use super::refused::{Refused, Reply};
use super::settle::{self, Runner, Settled};
use super::unknown;
use super::watch::{Alone, Answering, Client, Watch};
use crate::app::App;
use crate::budget::Slot;
use crate::grpc;
use crate::idempotency::stored::TraceOrigin;
use crate::idempotency::{Expiry, StoredResponse};
use crate::metrics::Outcome;
use crate::proxy::forwarding::Peer;
use crate::proxy::headers::{COMPLETER, FENCING_TOKEN};
use crate::proxy::{self, Bounds, Buffered, UpstreamError};
use crate::route::Route;
use crate::store::lease::Phase;
use crate::store::Lease;
use crate::telemetry::context::{self, in_span, phase};
use crate::telemetry::dispatch;

/// Runs a client's request for its held lease on a detached task and waits for its
/// answer, or for the route's `upstream_timeout` while the upstream has not answered:
/// then the client gets 504 and the task goes on alone.
pub async fn detached(
    app: &Arc<App>,
    route: &Arc<Route>,
    lease: Lease,
    request: Identified,
    peer: SocketAddr,
) -> (Outcome, Reply) {
    let watch = Arc::new(Watch::default());
    // Boxed: the future is KiBs, and spawning, polling to completion and
    // joining a task move it (and its output slot, as large) several times over;
    // a box moves as a pointer.
    let (owned, route_owned) = (app.clone(), route.clone());
    let mut alone = Alone::new(watch.clone(), route.clone());
    let mut request = http::Request::from_parts(request.parts, request.body);
    // The request's `max_concurrent_requests` slot goes with the call, which may outlive
    // the client (a reset, a disconnect, `upstream_timeout`).
    let slot = request.extensions_mut().remove::<Slot>();
    // A live answer comes back here at its head, the task going on to record it.
    let (early, live) = oneshot::channel();
    let client = Box::pin(async move {
        let _slot = slot;
        let (ip, runner) = (peer.ip(), Runner::Client);
        let client = Client {
            alone: &mut alone,
            early,
        };
        let ran = run(owned, route_owned, lease, request, ip, runner, Some(client)).await;
        (ran.0, ran.1)
    });
    let mut task = (app.tasks).spawn(dispatch::carry(client));
    let mut live = pin!(live);
    let mut live_open = true;
    // Nothing goes on after the client's timeout when the deadline is no later: the
    // call ends with it.
    let times_out = route.upstream_deadline > route.upstream_timeout;
    let timeout = tokio::time::sleep(route.upstream_timeout);
    let mut timeout = pin!(timeout);
    loop {
        tokio::select! {
            joined_task = &mut task => return joined(joined_task),
            head = &mut live, if live_open => match head {
                Ok(response) => return (Outcome::Executed, Ok(response)),
                Err(_) => live_open = false,
            },
            () = &mut timeout, if times_out => {
                if watch.detach() {
                    return (
                        Outcome::UpstreamError,
                        Err(Refused::UpstreamStillRunning(route.upstream_timeout)),
                    );
                }
                // The upstream answered in time: its answer is being stored, or
                // comes live.
                return tokio::select! {
                    joined_task = &mut task => joined(joined_task),
                    Ok(response) = &mut live, if live_open => (Outcome::Executed, Ok(response)),
                };
            }
        }
    }
}

/// The client's answer from its joined task.
fn joined(task: Result<(Outcome, Reply), tokio::task::JoinError>) -> (Outcome, Reply) {
    task.unwrap_or_else(|e| {
        // The detail (a panic message) is for the log, not for the client.
        tracing::error!(error = %e, "request task failed");
        (Outcome::UpstreamError, Err(Refused::TaskFailed))
    })
}

/// Runs the upstream call for a held lease and settles the lease with its outcome, as
/// `runner` does ([`Runner`]), telling `client`'s watch (a client's call: [`detached`])
/// when the upstream answered, and handing it a live answer at its head; a call whose
/// client was answered first (its `upstream_timeout`) is counted and logged when it ends.
pub async fn run(
    app: Arc<App>,
    route: Arc<Route>,
    lease: Lease,
    request: http::Request<Bytes>,
    peer: IpAddr,
    runner: Runner,
    client: Option<Client<'_>>,
) -> (Outcome, Reply, Settled) {
    let _in_flight = route.metrics.in_flight();
    let (parts, body) = request.into_parts();
    let is_grpc = grpc::is_grpc(&parts.headers);
    let traced = context::is_traced(&parts.extensions);
    let mut answering = Answering::new(client);
    if runner == Runner::Client && lease.after_lapse() {
        if let Some(stored) = unknown::lapse_problem(&route, is_grpc) {
            // Boxed: rare, and inline it would grow every execution's future.
            let (outcome, reply, settled) =
                Box::pin(store_problem(&app, &route, lease, stored)).await;
            if let Some(alone) = answering.alone() {
                alone.settled(false, settled);
            }
            // Nothing was forwarded: not an execution.
            let outcome = match outcome {
                Outcome::Executed => Outcome::UpstreamError,
                other => other,
            };
            return (outcome, reply, settled);
        }
    }
    let answer = call(
        &app,
        &route,
        &lease,
        parts,
        body,
        peer,
        runner,
        &mut answering,
    )
    .await;
    // A live answer's first client sees its end once the key is settled (or this task
    // ends, however: `Settling` and `Answering` then tell it, as not kept).
    let settling = answering.settling();
    let live = settling.is_live();
    let alone = answering.alone();
    let cancelled = matches!(
        answer,
        Err(UpstreamError::Timeout(_) | UpstreamError::Cancelled)
    );
    // The execution a replay of this answer links to: the request's span (or the
    // completer's), current here.
    let origin = context::current_origin(traced).map(TraceOrigin::from);
    let ran = in_span!(
        traced.then(|| phase!("settle")),
        settle_answer(&app, &route, lease, answer, origin, is_grpc, runner, live)
    );
    settling.done(ran.2);
    if let Some(alone) = alone {
        alone.settled(cancelled, ran.2);
    }
    ran
}

/// Settles the lease with the upstream call's outcome.
#[allow(clippy::too_many_arguments)]
async fn settle_answer(
    app: &Arc<App>,
    route: &Route,
    mut lease: Lease,
    answer: Result<Buffered, UpstreamError>,
    origin: Option<TraceOrigin>,
    is_grpc: bool,
    runner: Runner,
    live: bool,
) -> (Outcome, Reply, Settled) {
    if live {
        lease.went_live();
    }
    let stored = match answer {
        // A released key's live stream goes with its lease (`lua/release.lua`).
        Ok(answer) if releases(route, &answer) => {
            return settle::released(lease, answer, runner).await;
        }
        Ok(answer) => {
            let mut stored = to_store(answer, is_grpc);
            stored.origin = origin;
            let expiry = stamp(route, &mut stored);
            let first = stored.to_response(false);
            // The first client gets its cookies and per-exchange headers
            // (`replay_omit_headers`); they are not stored, so never replayed.
            stored.omit(&route.policy.replay_omit);
            return settle::complete(app, route, lease, stored, first, expiry).await;
        }
        Err(e) => match unknown::stored_problem(route, &e, is_grpc) {
            Some(stored) => StoredResponse { origin, ..stored },
            None => return settle::failed(lease, e, runner).await,
        },
    };
    store_problem(app, route, lease, stored).await
}

/// Completes the lease with a problem stored for the key in place of an answer, and
/// answers the client with it.
async fn store_problem(
    app: &Arc<App>,
    route: &Route,
    lease: Lease,
    mut stored: StoredResponse,
) -> (Outcome, Reply, Settled) {
    let expiry = stamp(route, &mut stored);
    let first = stored.to_response(false);
    settle::complete(app, route, lease, stored, first, expiry).await
}

/// The expiry of a record completed now, written into it under the route's
/// `expires_header` (unless that is off). A live answer's too: it is kept for `ttl` from
/// its end, however long it streamed, so its head's value (`ttl` from the head) never
/// promises more than is kept.
fn stamp(route: &Route, stored: &mut StoredResponse) -> Expiry {
    let expiry = Expiry::after(route.policy.settings.ttl);
    if let Some(name) = &route.policy.settings.expires_header.0 {
        expiry.stamp(stored, name);
    }
    expiry
}

/// The upstream call, with the lease's fencing token (and the completer's mark), under
/// the lease's heartbeat; an answer that streams goes live ([`live::record`]).
#[allow(clippy::too_many_arguments)]
async fn call(
    app: &App,
    route: &Route,
    lease: &Lease,
    mut parts: Parts,
    body: Bytes,
    peer: IpAddr,
    runner: Runner,
    answering: &mut Answering<'_>,
) -> Result<Buffered, UpstreamError> {
    let max_response = app.config.server.max_response_body.as_u64();
    let traced = context::is_traced(&parts.extensions);
    parts
        .headers
        .insert(FENCING_TOKEN, HeaderValue::from(lease.fence()));
    if runner == Runner::Completer {
        parts
            .headers
            .insert(COMPLETER, HeaderValue::from_static("1"));
    }
    let started = Instant::now();
    let peer = Peer::new(peer, &app.config.server);
    // The whole call is bounded by the route's `upstream_deadline`, and cancelled only
    // as the gateway stops, near the end of `server.shutdown_grace` (then its outcome is
    // unknown, settled like any other: `on_ambiguous`). Each stage applies both itself,
    // so that a live answer that is cut still tells its joiners before the key settles.
    let bounds = Bounds::new(&app.calls, route.upstream_deadline);
    let exchange = async {
        let forward = (app.upstream).forward_keyed(route, parts, body, peer);
        let answer = bounds.apply(forward).await?;
        if !live::streams(route, &answer) {
            let collected = proxy::collect(route, answer, max_response);
            return bounds.apply(collected).await;
        }
        // The head's expiry is `ttl` from now, a lower bound of the record's (from the
        // answer's end: `stamp`).
        let mut head =
            StoredResponse::from_upstream(answer.status(), answer.headers(), Bytes::new());
        // What a joiner links to (its head is a replay's): this execution.
        head.origin = context::current_origin(traced).map(TraceOrigin::from);
        if let Some(name) = &route.policy.settings.expires_header.0 {
            Expiry::after(route.policy.settings.ttl).stamp(&mut head, name);
        }
        let early = answering.at_head();
        live::record(app, route, lease, answer, head, early, &bounds).await
    };
    let answer = lease.heartbeat(pin!(exchange), Phase::Upstream).await;
    route.metrics.upstream(started);
    answer
}

/// A body below this is copied out of the upstream connection's buffers with its
/// headers ([`to_store`]); a larger one fills most of the buffer it arrived in.
const COMPACT_BELOW: usize = 64 * 1024;

/// What is stored of the upstream's answer. Its header values and a body that arrived
/// in one read are slices of the upstream connection's read buffer (8 KiB at least),
/// which they would keep alive while the completion waits for Redis and Postgres: a
/// small answer is copied into one allocation of its own size first, and the answer,
/// with its hold on that buffer, dropped here.
fn to_store(answer: Buffered, is_grpc: bool) -> StoredResponse {
    // Trailers are kept for a gRPC call answered in gRPC only: what other responses
    // carried in trailers was never stored, and is not now (response encoding 1, which
    // the previous release reads).
    let grpc_answer = is_grpc && grpc::is_grpc(&answer.headers);
    let trailers = answer.trailers.as_ref().filter(|_| grpc_answer);
    let small = answer.body.len() < COMPACT_BELOW;
    let stored = StoredResponse::from_upstream(answer.status, &answer.headers, answer.body)
        .with_trailers(trailers);
    match small {
        true => stored.compacted(),
        false => stored,
    }
}

/// Whether the upstream's answer releases the key: a release status, or a gRPC answer
/// (`200`, `application/grpc`) whose `grpc-status` is a release one.
fn releases(route: &Route, answer: &Buffered) -> bool {
    let policy = &route.policy;
    if policy.releases(answer.status) {
        return true;
    }
    let grpc_status = || grpc::status_of(&answer.headers, answer.trailers.as_ref());
    answer.status == http::StatusCode::OK
        && grpc::is_grpc(&answer.headers)
        && grpc_status().is_some_and(|code| policy.releases_grpc(code))
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, StatusCode};

    use super::*;

    /// An upstream answer whose header value and body are slices of one read buffer,
    /// as hyper's HTTP/1 client hands them over.
    fn answer_in(buffer: &Bytes, body_len: usize) -> Buffered {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_maybe_shared(buffer.slice(0..16)).unwrap();
        headers.insert(http::header::CONTENT_TYPE, value);
        Buffered {
            status: StatusCode::CREATED,
            headers,
            body: buffer.slice(16..16 + body_len),
            trailers: None,
        }
    }

    #[test]
    fn a_small_answer_keeps_nothing_of_the_upstream_buffer() {
        let buffer = Bytes::from(vec![b'a'; 8192]);
        let stored = to_store(answer_in(&buffer, 150), false);
        assert!(
            buffer.is_unique(),
            "the stored answer holds the read buffer"
        );
        assert_eq!(stored.body, vec![b'a'; 150]);
        assert_eq!(stored.headers.len(), 1);
        assert_eq!(stored.headers[0].1.as_bytes(), &[b'a'; 16]);
    }

    #[test]
    fn a_large_answer_is_not_copied() {
        let buffer = Bytes::from(vec![b'a'; 2 * COMPACT_BELOW]);
        let stored = to_store(answer_in(&buffer, COMPACT_BELOW), false);
        assert!(!buffer.is_unique());
        drop(stored);
        assert!(buffer.is_unique());
    }
}
