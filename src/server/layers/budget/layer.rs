//! The budget as a request layer: lends each request the listener's budget (for its
//! body) and charges its buffered response to it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::response::Response;
use http::Request;
use hyper::body::Body;
use tower::{Layer, Service};

use super::response::{overloaded, ResponseBody};
use crate::budget::ByteBudget;
use crate::problem::Problem;
use crate::proxy::headers::X_REQUEST_ID;
use crate::proxy::headers::{is_grpc, REPLAYED};
use crate::server::conn_limits::ConnLimits;

/// Puts a [`ByteBudget`] under each request ([`Budgeted`]).
#[derive(Clone)]
pub struct BudgetLayer {
    budget: Arc<ByteBudget>,
}

impl BudgetLayer {
    pub fn new(budget: Arc<ByteBudget>) -> Self {
        Self { budget }
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            budget: self.budget.clone(),
        }
    }
}

/// `inner`, with the budget in each request's extensions (the gateway charges the
/// body to it) and each buffered response charged to it ([`settle`]): the request's
/// connection's share of it when there is one ([`ConnLimits`]).
#[derive(Clone)]
pub struct Budgeted<S> {
    inner: S,
    budget: Arc<ByteBudget>,
}

impl<S, B> Service<Request<B>> for Budgeted<S>
where
    S: Service<Request<B>, Response = Response>,
    S::Future: Unpin,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = Settling<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let conn = request.extensions().get::<Arc<ConnLimits>>().cloned();
        let budget = conn.as_ref().map_or(&self.budget, |c| c.budget()).clone();
        request.extensions_mut().insert(budget.clone());
        Settling {
            inner: self.inner.call(request),
            budget,
        }
    }
}

/// A response on its way, [`settle`]d once ready.
pub struct Settling<F> {
    inner: F,
    budget: Arc<ByteBudget>,
}

impl<F, E> Future for Settling<F>
where
    F: Future<Output = Result<Response, E>> + Unpin,
{
    type Output = Result<Response<ResponseBody>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = ready!(Pin::new(&mut self.inner).poll(cx))?;
        Poll::Ready(Ok(settle(&self.budget, response)))
    }
}

/// Charges a buffered response (one carrying `Idempotent-Replayed`) to the
/// budget: an execution's always, a replay's only if it fits (else 503). Each answer is
/// charged for its own bytes, even a replay of bytes the replay cache shares with
/// others: the budget may count shared bytes more than once, never less than what
/// the answers hold.
pub fn settle(budget: &Arc<ByteBudget>, response: Response) -> Response<ResponseBody> {
    let Some(replayed) = response.headers().get(REPLAYED) else {
        return response.map(ResponseBody::plain);
    };
    let replayed = replayed.as_bytes() == b"true";
    // A body with trailers (gRPC) has no exact size: its data's length is the lower
    // bound its body gives.
    let hint = response.body().size_hint();
    let len = hint.exact().unwrap_or(hint.lower());
    if len == 0 {
        return response.map(ResponseBody::plain);
    }
    let charge = if replayed {
        match budget.try_take(len) {
            Some(charge) => charge,
            None => {
                let id = response.headers().get(X_REQUEST_ID).cloned();
                // A gRPC call's replay is a gRPC answer: so is its refusal.
                let grpc = is_grpc(response.headers());
                return overloaded(Problem::overloaded_buffers(), id, grpc);
            }
        }
    } else {
        budget.take_anyway(len)
    };
    response.map(|body| ResponseBody::charged(body, charge))
}
