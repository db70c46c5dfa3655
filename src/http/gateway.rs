//! The proxied-traffic handler: the HTTP edge of the request flow ([`crate::flow`]).
//!
//! Headers sanitised, request id, path canonical, then [`flow::serve`] in the
//! request's span; what the gateway answers itself ([`Refused`]) is rendered here:
//! as problem+json ([`crate::problem`]), or as a gRPC status for a gRPC call
//! ([`crate::grpc`]). Every keyed request ends in one
//! [`Outcome`], counted and logged once, here.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use http::HeaderValue;
use tracing::Instrument;

use super::AppState;
use crate::flow::{self, BodyError, Refused, Trace};
use crate::grpc;
use crate::idempotency::stored::TraceOrigin;
use crate::idempotency::{RecordId, Scope};
use crate::metrics::{self, Outcome, Protocol};
use crate::problem::Problem;
use crate::proxy::headers::{self, IDEMPOTENCY_STATUS, X_REQUEST_ID};
use crate::telemetry;

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
    // HTTP/2's `:authority` as `Host`, its `cookie` fields as one: what the key, scope
    // and fingerprint are read from, and what an HTTP/1.1 upstream must get.
    let authority = request.uri().authority().cloned();
    headers::normalize_incoming(authority.as_ref(), request.headers_mut());
    let is_grpc = grpc::is_grpc(request.headers());
    let protocol = protocol(request.version(), is_grpc);
    let request_id = request_id(request.headers().get(&X_REQUEST_ID));
    request
        .headers_mut()
        .insert(X_REQUEST_ID, request_id.clone());
    let mut trace = Trace::default();
    // The request's span: every line logged for it, by any layer (claim, stores,
    // upstream), carries these fields under the same names.
    let id = request_id.to_str().unwrap_or("");
    let span = telemetry::context::request_span(id, &mut request);
    // A traced request runs under the exporter's dispatcher.
    let exporter = (telemetry::dispatch::exporter())
        .filter(|_| telemetry::context::is_traced(request.extensions()));
    let mut response = match crate::route::path::canonicalize(request.uri_mut()) {
        Ok(()) => {
            let serving = flow::serve(&app, peer, request, &mut trace).instrument(span.clone());
            // Boxed: axum moves the handler's future three times on its way to hyper
            // (into its box among them); boxed, the flow's (KiBs) moves once.
            match exporter {
                Some(exporter) => {
                    Box::pin(telemetry::dispatch::Under::new(serving, Some(exporter))).await
                }
                None => Box::pin(serving).await,
            }
        }
        .unwrap_or_else(|refused| grpc::render(problem(refused), is_grpc)),
        Err(e) => {
            trace.outcome = Some(Outcome::Rejected);
            grpc::render(Problem::invalid_path(e), is_grpc)
        }
    };
    if trace.outcome == Some(Outcome::Bypassed) {
        (response.headers_mut()).insert(IDEMPOTENCY_STATUS, HeaderValue::from_static("bypassed"));
    }
    response
        .headers_mut()
        .insert(X_REQUEST_ID, request_id.clone());
    if let Some(origin) = response.extensions().get::<TraceOrigin>() {
        telemetry::context::link_replay(&span, (origin.trace_id, origin.span_id));
    }
    let route = trace.route.as_ref().map(|r| r.name.as_str());
    let outcome = trace.outcome.map(Outcome::as_str);
    telemetry::context::record_end(&span, route, outcome, response.status().as_u16());
    let ids = telemetry::context::ids(&span);
    count_and_log(&mut trace, &request_id, protocol, &response, started, ids);
    response
}

/// Counts the request in its route's metrics and logs its one `request` line.
fn count_and_log(
    trace: &mut Trace,
    request_id: &HeaderValue,
    protocol: Protocol,
    response: &Response,
    started: Instant,
    ids: Option<(opentelemetry::TraceId, opentelemetry::SpanId)>,
) {
    let route = trace
        .route
        .as_ref()
        .map_or("_unmatched", |r| r.name.as_str());
    match (&trace.route, trace.outcome) {
        (Some(r), Some(outcome)) => r.metrics.request(outcome, started),
        (Some(r), None) => r.metrics.unkeyed(),
        (None, _) => metrics::unmatched(started, protocol),
    }
    if let Some(r) = &trace.route {
        r.metrics.protocol(protocol);
    }
    tracing::info!(
        request_id = request_id.to_str().unwrap_or(""),
        route,
        outcome = trace.outcome.map_or("unkeyed", Outcome::as_str),
        protocol = protocol.as_str(),
        status = response.status().as_u16(),
        // Whole microseconds, so the number prints as written (0.102, not
        // 0.10200300000000001): shorter to format, and to read.
        duration_ms = started.elapsed().as_micros() as f64 / 1000.0,
        key_hash = match (trace.key_hash.take(), trace.record) {
            (Some(short), _) => short,
            (None, record) => record.map(RecordId::short).unwrap_or_default(),
        },
        scope_hash = trace.scope.map(Scope::to_hex).unwrap_or_default(),
        trace_id = ids.map(|(t, _)| tracing::field::display(t)),
        span_id = ids.map(|(_, s)| tracing::field::display(s)),
        "request"
    );
}

/// How the request came: a gRPC call, another stream of an HTTP/2 connection, or HTTP/1.
fn protocol(version: http::Version, is_grpc: bool) -> Protocol {
    match (version, is_grpc) {
        (http::Version::HTTP_2, true) => Protocol::Grpc,
        (http::Version::HTTP_2, false) => Protocol::Http2,
        _ => Protocol::Http1,
    }
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

/// The problem of a refusal.
fn problem(refused: Refused) -> Problem {
    match refused {
        Refused::NoRoute(path_len) => Problem::no_route(path_len),
        Refused::Key(e) => Problem::from(e),
        Refused::Scope(e) => Problem::from(e),
        Refused::Body(BodyError::TooLarge(limit)) => Problem::body_too_large(limit),
        Refused::Body(BodyError::Overloaded) => Problem::overloaded_buffers(),
        Refused::Body(BodyError::Timeout(after)) => Problem::body_timeout(after),
        Refused::Body(BodyError::Unreadable(e)) => Problem::body_unreadable(e),
        Refused::Mismatch(status) => Problem::mismatch(status),
        Refused::InFlight(remaining) => Problem::in_flight(remaining),
        Refused::Superseded(retry_after) => Problem::superseded(retry_after),
        Refused::Store(e) => Problem::from(&e),
        Refused::Upstream(e) => Problem::from(&e),
        Refused::UpstreamStillRunning(after) => Problem::upstream_still_running(after),
        Refused::TaskFailed => Problem::internal("the request failed inside the gateway"),
    }
}
