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
/// body to it) and each buffered response charged to it ([`settle`]).
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
        request.extensions_mut().insert(self.budget.clone());
        Settling {
            inner: self.inner.call(request),
            budget: self.budget.clone(),
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
/// budget: an execution's always, a replay's only if it fits (else 503).
pub fn settle(budget: &Arc<ByteBudget>, response: Response) -> Response<ResponseBody> {
    let Some(replayed) = response.headers().get(REPLAYED) else {
        return response.map(ResponseBody::plain);
    };
    let replayed = replayed.as_bytes() == b"true";
    let len = response.body().size_hint().exact().unwrap_or(0);
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
