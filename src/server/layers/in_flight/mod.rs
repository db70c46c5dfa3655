//! `server.max_in_flight`: requests in flight on the proxy listener. A request over
//! the limit is answered 503 `overloaded` at once, before the gateway sees it (its
//! body is dropped unread: lingering close drains it); an admitted one holds its slot
//! until its response is ready to be written.

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
use crate::metrics::Limit;
use crate::problem::Problem;
use crate::proxy::headers::{is_grpc, X_REQUEST_ID};

/// Requests in flight on one proxy listener, up to `server.max_in_flight`.
pub struct InFlightLimit {
    max_in_flight: usize,
    in_flight: AtomicUsize,
    refused: Counter,
}

impl InFlightLimit {
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            max_in_flight,
            in_flight: AtomicUsize::new(0),
            refused: Limit::MaxInFlight.counter(),
        }
    }

    /// A slot for one request, or the 503 to answer instead (counted).
    pub fn enter(self: &Arc<Self>) -> Result<InFlight, Problem> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = InFlight(self.clone());
        if before >= self.max_in_flight {
            drop(slot);
            self.refused.increment(1);
            return Err(Problem::overloaded_in_flight(self.max_in_flight));
        }
        Ok(slot)
    }
}

/// One request counted against `server.max_in_flight` while it lives.
pub struct InFlight(Arc<InFlightLimit>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
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

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self.limit.enter() {
            Ok(slot) => Admitted::Running {
                inner: self.inner.call(request),
                _slot: slot,
            },
            // The body is dropped unread: lingering close drains it.
            Err(problem) => {
                let id = request.headers().get(&X_REQUEST_ID).cloned();
                let grpc = is_grpc(request.headers());
                Admitted::Refused(Some(overloaded(problem, id, grpc)))
            }
        }
    }
}

/// An admitted request's response, its slot held until it is ready; or the refusal.
pub enum Admitted<F> {
    Running { inner: F, _slot: InFlight },
    Refused(Option<Response<ResponseBody>>),
}

impl<F, E> Future for Admitted<F>
where
    F: Future<Output = Result<Response<ResponseBody>, E>> + Unpin,
{
    type Output = Result<Response<ResponseBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Admitted::Running { inner, .. } => Pin::new(inner).poll(cx),
            Admitted::Refused(answer) => {
                Poll::Ready(Ok(answer.take().expect("polled after it was ready")))
            }
        }
    }
}
