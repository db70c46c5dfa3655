//! The upstream side: pooled clients (HTTP/1 for `http://` and `https://`: one shared;
//! one per route with TLS settings of its own, see [`crate::tls::upstream`], or with
//! an HTTP/2 `upstream_protocol`: one multiplexed connection per upstream), request
//! forwarding, and the errors an upstream call can end in ([`UpstreamError`]). A TLS
//! handshake failure is a connect error: nothing was sent.
//!
//! Keyed requests are sent with their buffered body; their answers are read whole
//! ([`collect`]) or, when they stream live, by the flow (`crate::flow::live`): either
//! way the response is stored, trailers included. Other requests stream through,
//! trailers included. Either way the
//! headers only the gateway sets are dropped from the response's headers and trailers.

pub mod forwarding;
pub mod headers;

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio_util::sync::CancellationToken;

use self::forwarding::Peer;
use crate::config::{RouteConfig, UpstreamProtocol};
use crate::route::Route;
use crate::telemetry::context::{self, in_span};
use crate::tls::upstream::{self as tls, Connector};
use crate::tls::TlsError;

/// How an upstream call failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No answer within the route's `upstream_timeout` (a request without a key) or
    /// `upstream_deadline` (a keyed one).
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection (TCP, or the TLS handshake) could not be made: the request
    /// never reached the upstream.
    #[error("could not connect to the upstream: {0}")]
    Connect(#[source] hyper_util::client::legacy::Error),
    /// The exchange broke after the request may have reached the upstream.
    #[error("the upstream exchange failed: {0}")]
    Exchange(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The gateway stopped (near the end of `server.shutdown_grace`) before the
    /// upstream answered.
    #[error("the gateway shut down before the upstream answered")]
    Cancelled,
    /// The upstream answered with a body above `server.max_response_body`.
    #[error("the upstream response body exceeds {0} bytes")]
    ResponseTooLarge(u64),
}

impl UpstreamError {
    /// Whether the request may have reached the upstream and been acted on.
    pub fn is_ambiguous(&self) -> bool {
        matches!(
            self,
            UpstreamError::Timeout(_) | UpstreamError::Exchange(_) | UpstreamError::Cancelled
        )
    }
}

/// A buffered upstream response.
pub struct Buffered {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The trailers after the body (HTTP/2, chunked HTTP/1): a gRPC call's status.
    pub trailers: Option<HeaderMap>,
}

type HttpClient = Client<Connector, Body>;

/// The HTTP clients of the routes.
#[derive(Clone)]
pub struct Upstream {
    /// Every HTTP/1 route without TLS settings of its own.
    shared: HttpClient,
    /// Routes with `[routes.tls]` or an HTTP/2 `upstream_protocol`, by name.
    own: HashMap<String, HttpClient>,
}

impl Upstream {
    /// Builds the clients (reads CA files and, when an `https://` route needs them,
    /// the system's roots).
    pub fn new(routes: &[RouteConfig]) -> Result<Self, TlsError> {
        let https = |r: &RouteConfig| r.upstream.scheme_str() == Some("https");
        let shares =
            |r: &RouteConfig| !r.tls.is_set() && r.upstream_protocol == UpstreamProtocol::Http1;
        let shared_https = routes.iter().any(|r| https(r) && shares(r));
        let mut own = HashMap::new();
        for (i, route) in routes.iter().enumerate() {
            let protocol = route.upstream_protocol;
            let connector = if route.tls.is_set() {
                tls::for_route(&format!("routes[{i}]"), &route.name, &route.tls, protocol)?
            } else if !shares(route) {
                tls::with_protocol(https(route), protocol)?
            } else {
                continue;
            };
            own.insert(route.name.clone(), client(connector, protocol));
        }
        Ok(Self {
            shared: client(tls::shared(shared_https)?, UpstreamProtocol::Http1),
            own,
        })
    }

    fn client(&self, route: &Route) -> &HttpClient {
        self.own.get(&route.name).unwrap_or(&self.shared)
    }

    /// Sends a keyed request with its buffered body and buffers the response, all
    /// within the route's `upstream_deadline` (its client may have been answered at
    /// `upstream_timeout` already, the call going on without it).
    pub async fn forward_buffered(
        &self,
        route: &Route,
        parts: Parts,
        body: Bytes,
        peer: Peer,
        max_response: u64,
    ) -> Result<Buffered, UpstreamError> {
        let exchange = async {
            let answer = self.forward_keyed(route, parts, body, peer).await?;
            collect(route, answer, max_response).await
        };
        tokio::time::timeout(route.upstream_deadline, exchange)
            .await
            .map_err(|_| UpstreamError::Timeout(route.upstream_deadline))?
    }

    /// Sends a keyed request with its buffered body and hands back the answer's head,
    /// its body still to be read ([`collect`], or live: `crate::flow::live`); the
    /// gateway's own names are dropped from the headers. The caller bounds the call.
    pub async fn forward_keyed(
        &self,
        route: &Route,
        parts: Parts,
        body: Bytes,
        peer: Peer,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let span = context::upstream_span(&parts, &route.name);
        let request = build_request(route, parts, Body::from(body), peer, span.as_ref());
        let response = in_span!(span, self.client(route).request(request));
        let response = response.map_err(classify)?;
        let (mut parts, body) = response.into_parts();
        strip_owned(route, &mut parts.headers);
        Ok(Response::from_parts(parts, body))
    }

    /// Forwards a request that is not keyed, streaming both bodies. The timeout covers
    /// the wait for the response head.
    pub async fn forward_streaming(
        &self,
        route: &Route,
        parts: Parts,
        body: Body,
        peer: Peer,
    ) -> Result<Response<Body>, UpstreamError> {
        let span = context::upstream_span(&parts, &route.name);
        let request = build_request(route, parts, body, peer, span.as_ref());
        let response = async { in_span!(span, self.client(route).request(request)) };
        let response = tokio::time::timeout(route.upstream_timeout, response)
            .await
            .map_err(|_| UpstreamError::Timeout(route.upstream_timeout))?
            .map_err(classify)?;
        let (mut parts, body) = response.into_parts();
        headers::strip_hop_by_hop(&mut parts.headers);
        strip_owned(route, &mut parts.headers);
        // Its trailers, when they come, lose the same names as its headers did.
        let expires = route.policy.settings.expires_header.0.clone();
        let body = body.map_frame(move |frame| match frame.into_trailers() {
            Ok(mut trailers) => {
                strip_owned_names(expires.as_ref(), &mut trailers);
                Frame::trailers(trailers)
            }
            Err(frame) => frame,
        });
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// The bounds of a keyed call: the route's `upstream_deadline`, counted from when the
/// call started, and the gateway's cancellation of calls as it stops.
pub struct Bounds<'a> {
    calls: &'a CancellationToken,
    until: tokio::time::Instant,
    deadline: Duration,
}

impl<'a> Bounds<'a> {
    pub fn new(calls: &'a CancellationToken, deadline: Duration) -> Self {
        Self {
            calls,
            until: tokio::time::Instant::now() + deadline,
            deadline,
        }
    }

    /// Runs one stage of the call within the bounds: `Timeout` past the deadline,
    /// `Cancelled` as the gateway stops.
    pub async fn apply<T>(
        &self,
        stage: impl std::future::Future<Output = Result<T, UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        tokio::select! {
            done = tokio::time::timeout_at(self.until, stage) => {
                done.unwrap_or(Err(UpstreamError::Timeout(self.deadline)))
            }
            () = self.calls.cancelled() => Err(UpstreamError::Cancelled),
        }
    }
}

/// Reads a keyed answer's body whole (at most `max_response` bytes) with its trailers.
pub async fn collect(
    route: &Route,
    answer: Response<Incoming>,
    max_response: u64,
) -> Result<Buffered, UpstreamError> {
    let (parts, body) = answer.into_parts();
    let collected = Limited::new(body, max_response as usize)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                UpstreamError::ResponseTooLarge(max_response)
            } else {
                UpstreamError::Exchange(e)
            }
        })?;
    let mut trailers = collected.trailers().cloned();
    if let Some(trailers) = trailers.as_mut() {
        strip_owned(route, trailers);
    }
    Ok(Buffered {
        status: parts.status,
        headers: parts.headers,
        body: collected.to_bytes(),
        trailers,
    })
}

/// Drops what the gateway says itself from an upstream's response headers or
/// trailers: the gateway-owned names, and the route's `expires_header` (only the
/// gateway tells how long a key is honoured: on a record it stores, from that record).
pub fn strip_owned(route: &Route, headers: &mut HeaderMap) {
    strip_owned_names(route.policy.settings.expires_header.0.as_ref(), headers);
}

fn strip_owned_names(expires_header: Option<&HeaderName>, headers: &mut HeaderMap) {
    headers::strip_gateway_owned_response(headers);
    if let Some(name) = expires_header {
        headers.remove(name);
    }
}

/// How long an upstream connection stays open unused.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

fn client(connector: Connector, protocol: UpstreamProtocol) -> HttpClient {
    client_with_idle(connector, protocol, POOL_IDLE_TIMEOUT)
}

/// An HTTP/1 client keeps one connection per request in flight (with its read and
/// write buffers and its task, ~40 KiB): those of a burst are closed once `idle` has
/// passed unused. The pool's timer is what closes them: without one, hyper checks the
/// timeout only when a connection is checked out, and a burst's connections stay
/// open, and their memory held, until the upstream closes them.
fn client_with_idle(
    connector: Connector,
    protocol: UpstreamProtocol,
    idle: Duration,
) -> HttpClient {
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_idle_timeout(idle)
        .pool_timer(TokioTimer::new())
        .pool_max_idle_per_host(256);
    if protocol != UpstreamProtocol::Http1 {
        // One connection per upstream, its streams multiplexed; pings find a dead one.
        builder
            .timer(TokioTimer::new())
            .http2_only(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .http2_keep_alive_timeout(Duration::from_secs(20))
            .http2_keep_alive_while_idle(true);
    }
    builder.build(connector)
}

fn classify(e: hyper_util::client::legacy::Error) -> UpstreamError {
    if e.is_connect() {
        UpstreamError::Connect(e)
    } else {
        UpstreamError::Exchange(Box::new(e))
    }
}

/// `parts` went through [`headers::sanitize_incoming`] when the request arrived; `span`
/// is the call's, the parent the upstream is told of (when spans are exported).
fn build_request(
    route: &Route,
    mut parts: Parts,
    body: Body,
    peer: Peer,
    span: Option<&tracing::Span>,
) -> Request<Body> {
    forwarding::prepare_upstream_request(&mut parts.headers, peer);
    context::inject(span, &mut parts.headers);
    parts.uri = upstream_uri(&route.upstream, &parts.uri);
    parts.version = match route.upstream_protocol {
        UpstreamProtocol::Http1 => http::Version::HTTP_11,
        UpstreamProtocol::H2c | UpstreamProtocol::H2 => {
            // `TE` is hop-by-hop and was removed on arrival; `trailers`, the one value
            // HTTP/2 allows, is what gRPC servers require to see.
            if headers::is_grpc(&parts.headers) {
                parts.headers.insert(http::header::TE, headers::TRAILERS);
            }
            http::Version::HTTP_2
        }
    };
    Request::from_parts(parts, body)
}

/// The upstream base URL joined with the client's path and query.
fn upstream_uri(base: &Uri, original: &Uri) -> Uri {
    let target = original.path_and_query().map_or("/", PathAndQuery::as_str);
    let base_path = base.path().trim_end_matches('/');
    let mut builder = Uri::builder();
    if let Some(scheme) = base.scheme() {
        builder = builder.scheme(scheme.clone());
    }
    if let Some(authority) = base.authority() {
        builder = builder.authority(authority.clone());
    }
    let joined = if base_path.is_empty() {
        target.to_string()
    } else {
        format!("{base_path}{target}")
    };
    builder
        .path_and_query(joined)
        .build()
        .unwrap_or_else(|_| base.clone())
}

#[cfg(test)]
mod tests;
