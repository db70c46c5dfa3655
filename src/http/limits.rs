//! Admission limits of the proxy listener: requests in flight (`server.max_in_flight`)
//! and the byte budget for buffered bodies (`server.buffer_budget`, [`super::budget`]).
//!
//! Keyed request bodies are charged in [`read_bounded`](super::gateway) before
//! anything is claimed, and the charge travels inside the body's bytes, so it is
//! returned only when the last copy of the body is gone: after the upstream call, also
//! when the client hung up.
//!
//! Buffered responses (stored, replayed) are charged when the handler returns
//! ([`Limits::settle`]), and the charge again travels inside the bytes handed to hyper,
//! so a client that does not read keeps it until `server.write_timeout` closes its
//! connection. A response that was just executed is charged even over the budget (the
//! upstream acted; refusing would only throw the answer away); a replay that does not
//! fit is answered 503 `overloaded` instead (the stored response stays, a retry gets
//! it). Once the budget is spent, every new keyed request is refused before its body
//! is read, so what is buffered stays within the budget plus what the requests
//! already admitted bring back (at most `max_in_flight` responses).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::HeaderValue;
use hyper::body::{Body, Frame, SizeHint};
use metrics::Counter;

use super::budget::{ByteBudget, Charge};
use super::problem::Problem;
use crate::config::ServerConfig;
use crate::metrics::Limit;
use crate::proxy::headers::REPLAYED;
use crate::proxy::headers::X_REQUEST_ID;

/// The limits one proxy listener enforces on its requests.
pub struct Limits {
    max_in_flight: usize,
    in_flight: AtomicUsize,
    in_flight_refused: Counter,
    pub budget: Arc<ByteBudget>,
}

impl Limits {
    pub fn from_config(server: &ServerConfig) -> Self {
        Self {
            max_in_flight: server.max_in_flight,
            in_flight: AtomicUsize::new(0),
            in_flight_refused: Limit::MaxInFlight.counter(),
            budget: Arc::new(ByteBudget::new(server.buffer_budget.as_u64())),
        }
    }

    /// A slot for one request, or the 503 to answer instead (counted).
    pub fn enter(self: &Arc<Self>) -> Result<InFlight, Problem> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = InFlight(self.clone());
        if before >= self.max_in_flight {
            drop(slot);
            self.in_flight_refused.increment(1);
            return Err(Problem::overloaded_in_flight(self.max_in_flight));
        }
        Ok(slot)
    }

    /// Charges a buffered response (one carrying `Idempotent-Replayed`) to the
    /// budget: an execution's always, a replay's only if it fits (else 503).
    pub fn settle(&self, response: Response) -> Response<ResponseBody> {
        let Some(replayed) = response.headers().get(REPLAYED) else {
            return response.map(ResponseBody::plain);
        };
        let replayed = replayed.as_bytes() == b"true";
        let len = response.body().size_hint().exact().unwrap_or(0);
        if len == 0 {
            return response.map(ResponseBody::plain);
        }
        let charge = if replayed {
            match self.budget.try_take(len) {
                Some(charge) => charge,
                None => {
                    let id = response.headers().get(X_REQUEST_ID).cloned();
                    return overloaded(Problem::overloaded_buffers(), id);
                }
            }
        } else {
            self.budget.take_anyway(len)
        };
        response.map(|body| ResponseBody {
            inner: body,
            charge: Some(charge),
        })
    }
}

/// A 503 `overloaded` answer, with the request's id when there is one.
pub fn overloaded(problem: Problem, request_id: Option<HeaderValue>) -> Response<ResponseBody> {
    let mut response = problem.into_response();
    if let Some(id) = request_id {
        response.headers_mut().insert(X_REQUEST_ID, id);
    }
    response.map(ResponseBody::plain)
}

/// One request counted against `server.max_in_flight` while it lives.
pub struct InFlight(Arc<Limits>);

impl InFlight {
    pub fn limits(&self) -> &Limits {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body whose data carries its [`Charge`], so the budget is given back
/// when hyper has written it (or dropped it with the connection), not when hyper has
/// merely taken it into its write buffer.
pub struct ResponseBody {
    inner: axum::body::Body,
    charge: Option<Charge>,
}

impl ResponseBody {
    pub fn plain(inner: axum::body::Body) -> Self {
        Self {
            inner,
            charge: None,
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => match this.charge.take() {
                // A buffered body is one frame: the whole charge goes with it.
                Some(charge) => Poll::Ready(Some(Ok(frame.map_data(|d| charge.attach(d))))),
                None => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
