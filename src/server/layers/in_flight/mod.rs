//! `server.max_concurrent_requests`: requests in flight on the proxy listener, and each
//! connection's share of them (`server.connection_share`). A request over either is
//! answered 503 `overloaded` at once, before the gateway sees it (its body is dropped
//! unread: lingering close drains it); an admitted one holds its slot until its
//! response is ready to be written, or, when its upstream call outlives its client (a
//! reset, a disconnect, `upstream_timeout`), until that call ends: the slot ([`Slot`])
//! rides in the request's extensions to the detached call, which keeps it.
//!
//! The layer also keeps the request open on its connection until its answer is
//! dropped (`server.idle_timeout`), and tells the connection when a client left before
//! its answer was ready (`server.http2_max_reset_streams`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::Response;
use http::Request;
use metrics::Counter;
use tower::{Layer, Service};

use super::budget::{overloaded, ResponseBody};
use crate::budget::Slot;
use crate::metrics::Limit;
use crate::problem::Problem;
use crate::proxy::headers::{is_grpc, X_REQUEST_ID};
use crate::server::conn_limits::{ConnLimits, Open};

/// Requests in flight on one proxy listener, up to `server.max_concurrent_requests`.
pub struct InFlightLimit {
    max_concurrent_requests: usize,
    in_flight: AtomicUsize,
    refused: Counter,
}

impl InFlightLimit {
    pub fn new(max_concurrent_requests: usize) -> Self {
        Self {
            max_concurrent_requests,
            in_flight: AtomicUsize::new(0),
            refused: Limit::MaxConcurrentRequests.counter(),
        }
    }

    /// A slot for one request (on `conn`, within its share), or the 503 to answer
    /// instead (counted).
    pub fn enter(self: &Arc<Self>, conn: Option<&Arc<ConnLimits>>) -> Result<InFlight, Problem> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let mut slot = InFlight {
            limit: self.clone(),
            conn: None,
        };
        if before >= self.max_concurrent_requests {
            drop(slot);
            self.refused.increment(1);
            return Err(Problem::overloaded_in_flight(self.max_concurrent_requests));
        }
        if let Some(conn) = conn {
            conn.enter().map_err(Problem::overloaded_connection)?;
            slot.conn = Some(conn.clone());
        }
        Ok(slot)
    }
}

/// One request counted against `server.max_concurrent_requests` (and its connection's
/// share) while it lives.
pub struct InFlight {
    limit: Arc<InFlightLimit>,
    conn: Option<Arc<ConnLimits>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.limit.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(conn) = &self.conn {
            conn.leave();
        }
    }
}

/// Admits each request under an [`InFlightLimit`] ([`Admit`]).
#[derive(Clone)]
pub struct InFlightLayer {
    limit: Arc<InFlightLimit>,
}

impl InFlightLayer {
    pub fn new(limit: Arc<InFlightLimit>) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            inner,
            limit: self.limit.clone(),
        }
    }
}

/// `inner` for the requests the limit admits, 503 `overloaded` for the others.
#[derive(Clone)]
pub struct Admit<S> {
    inner: S,
    limit: Arc<InFlightLimit>,
}

impl<S, B> Service<Request<B>> for Admit<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>>,
    S::Future: Unpin,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = Admitted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let conn = request.extensions().get::<Arc<ConnLimits>>().cloned();
        let open = conn.as_ref().map(|c| c.open());
        // Every HTTP/2 answer is under its connection's send watchdog.
        let watch = conn
            .clone()
            .filter(|_| request.version() == http::Version::HTTP_2);
        let state = match self.limit.enter(conn.as_ref()) {
            Ok(slot) => {
                // A detached upstream call takes a copy ([`crate::flow::run::detached`]).
                let slot = Slot::new(slot);
                request.extensions_mut().insert(slot.clone());
                State::Running {
                    inner: self.inner.call(request),
                    _slot: slot,
                }
            }
            // The body is dropped unread: lingering close drains it.
            Err(problem) => {
                let id = request.headers().get(&X_REQUEST_ID).cloned();
                let grpc = is_grpc(request.headers());
                State::Refused(Some(overloaded(problem, id, grpc)))
            }
        };
        Admitted {
            state,
            open,
            conn,
            watch,
        }
    }
}

/// An admitted request's response, its slot held until it is ready; or the refusal.
/// Dropped before either (the client reset the stream or went away), it tells the
/// connection ([`ConnLimits::abandoned`]).
pub struct Admitted<F> {
    state: State<F>,
    /// Handed to the response body; `None` once it was.
    open: Option<Open>,
    conn: Option<Arc<ConnLimits>>,
    /// An HTTP/2 request's connection, whose send watchdog watches the answer.
    watch: Option<Arc<ConnLimits>>,
}

enum State<F> {
    Running { inner: F, _slot: Slot },
    Refused(Option<Response<ResponseBody>>),
}

impl<F, E> Future for Admitted<F>
where
    F: Future<Output = Result<Response<ResponseBody>, E>> + Unpin,
{
    type Output = Result<Response<ResponseBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let answer = match &mut this.state {
            State::Running { inner, .. } => std::task::ready!(Pin::new(inner).poll(cx)),
            State::Refused(answer) => Ok(answer.take().expect("polled after it was ready")),
        };
        this.conn = None;
        let (open, watch) = (this.open.take(), this.watch.take());
        Poll::Ready(answer.map(|response| {
            response.map(|mut body| {
                if let Some(open) = open {
                    body = body.keeping(open);
                }
                match watch {
                    Some(conn) => body.watched(&conn),
                    None => body,
                }
            })
        }))
    }
}

impl<F> Drop for Admitted<F> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.abandoned();
        }
    }
}
