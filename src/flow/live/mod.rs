//! Live answers (`idempotency.streaming = "live"`): a keyed answer that streams is
//! forwarded to its first client as the upstream sends it and recorded on the way
//! ([`record`]); duplicates that wait join it from any replica ([`join`]); once it
//! ends it is settled like any other answer (stored whole, or released), and later
//! retries replay it whole.
//!
//! Which answers stream ([`streams`]): `text/event-stream`, gRPC answers (server
//! streaming; a unary call's answer, which ends at once, is never published), and any
//! answer without a `Content-Length`, unless its status releases the key or its body is
//! known to be empty (a gRPC trailers-only answer). An answer
//! with a `Content-Length` is buffered: it is whole in a read or a few, and buffering
//! keeps its one compact copy.
//!
//! The parts: the [`recording::Recording`] one answer shares, the [`tee`] that fills it,
//! the [`publish`]er that writes it to Redis for joiners, the joiners' side, and SSE
//! resume (`Last-Event-ID`) for joiners and replays ([`resume`]).

pub mod join;
mod publish;
pub mod recording;
pub mod resume;
mod tee;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::HeaderName;
use hyper::body::Incoming;
use tokio::sync::oneshot;

use self::recording::{FirstBody, Recording};
use crate::app::App;
use crate::config::{InFlightPolicy, Streaming};
use crate::grpc;
use crate::idempotency::StoredResponse;
use crate::metrics;
use crate::proxy::{Bounds, Buffered, UpstreamError};
use crate::route::Route;
use crate::store::Lease;

/// A gRPC answer with its status in its headers is trailers-only: nothing follows.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// Whether an answer with this head streams live on `route` (one whose body is already
/// known to be empty does not: it is buffered, so that it keeps its framing, a gRPC
/// trailers-only answer as one HEADERS frame).
pub fn streams(route: &Route, answer: &http::Response<Incoming>) -> bool {
    let (status, headers) = (answer.status(), answer.headers());
    let settings = &route.policy.settings;
    if settings.streaming != Streaming::Live
        || route.policy.releases(status)
        || hyper::body::Body::is_end_stream(answer.body())
        || headers.contains_key(GRPC_STATUS)
    {
        return false;
    }
    let event_stream =
        (headers.get(CONTENT_TYPE)).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    event_stream || grpc::is_grpc(headers) || !headers.contains_key(CONTENT_LENGTH)
}

/// Runs a live answer into `recording`: its first client is answered at once through
/// `early` (when it still waits) with `head` (the stored form of the answer's head,
/// expiry stamped) and a body that follows the upstream's, ending once the caller says
/// the key is settled ([`Recording::settled`]); the body is recorded and, when somebody
/// joins, published; the whole answer comes back for settling.
pub async fn record(
    app: &App,
    route: &Route,
    lease: &Lease,
    answer: http::Response<Incoming>,
    head: StoredResponse,
    (recording, early): (Arc<Recording>, Option<oneshot::Sender<Response>>),
    bounds: &Bounds<'_>,
) -> Result<Buffered, UpstreamError> {
    let (parts, body) = answer.into_parts();
    let _counted = Counted::new();
    // The first client and joiners get the body as it comes (and a joiner may resume
    // it): never with the upstream's length. A replay of the record has its own.
    let mut head = head;
    head.headers.retain(|(name, _)| name != CONTENT_LENGTH);
    if let Some(early) = early {
        let first = head.to_response(false);
        let first = first.map(|_| Body::new(FirstBody::new(recording.clone())));
        // A client gone already drops its body: the recording goes on without it.
        let _ = early.send(first);
    }
    // Only a route whose duplicates wait can be joined.
    let joinable = route.policy.settings.in_flight == InFlightPolicy::Wait;
    let writer = joinable.then(|| app.stores.live_writer(lease)).flatten();
    let publisher = writer.map(|writer| {
        let mut joiners = head;
        joiners.omit(&route.policy.replay_omit);
        let publish = publish::publish(writer, recording.clone(), joiners.encode());
        (app.tasks).spawn(crate::telemetry::dispatch::carry(publish))
    });
    let max = app.config.server.max_response_body.as_u64();
    // Cut at the deadline or the shutdown: the tee, dropped, tells the recording, and
    // the publisher writes the cut before the key settles.
    let mut teed = bounds.apply(tee::tee(route, &recording, body, max)).await;
    if recording.over() {
        // Past the limit the record is the 502 however the call ended (a slow first
        // client reaching the deadline included): the upstream acted, and a retry must
        // not run it again.
        teed = Err(UpstreamError::ResponseTooLarge(max));
    }
    if let Some(publisher) = publisher {
        // The end goes to the joiners before the key completes (a joiner that misses
        // it finds the record: see `join`).
        let bound = app.config.redis.command_timeout * 2 + Duration::from_millis(100);
        let _ = tokio::time::timeout(bound, publisher).await;
    }
    let (body, trailers) = teed?;
    Ok(Buffered {
        status: parts.status,
        headers: parts.headers,
        body,
        trailers,
    })
}

/// Counts a live answer in `idemgate_live_answers` while it lives.
struct Counted;

impl Counted {
    fn new() -> Self {
        metrics::live_answers(1.0);
        Self
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        metrics::live_answers(-1.0);
    }
}
