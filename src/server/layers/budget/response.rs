//! The response body the proxy listener hands hyper: its data carries its [`Charge`],
//! if any; and the 503 `overloaded` answer the proxy listener's limits give (a gRPC
//! status to a gRPC call).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::Response;
use bytes::Bytes;
use http::HeaderValue;
use hyper::body::{Body, Frame, SizeHint};

use crate::budget::Charge;
use crate::grpc;
use crate::problem::Problem;
use crate::proxy::headers::X_REQUEST_ID;

/// A 503 `overloaded` answer, with the request's id when there is one; to a gRPC call
/// (`grpc`), the gRPC status `UNAVAILABLE` instead ([`grpc::render`]).
pub fn overloaded(
    problem: Problem,
    request_id: Option<HeaderValue>,
    grpc: bool,
) -> Response<ResponseBody> {
    let mut response = grpc::render(problem, grpc);
    if let Some(id) = request_id {
        response.headers_mut().insert(X_REQUEST_ID, id);
    }
    response.map(ResponseBody::plain)
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

    /// `inner`, whose data gives `charge` back once written.
    pub fn charged(inner: axum::body::Body, charge: Charge) -> Self {
        Self {
            inner,
            charge: Some(charge),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::response::Response;
    use http::header::CONTENT_TYPE;
    use http::{HeaderValue, StatusCode};

    use super::super::layer::settle;
    use crate::budget::ByteBudget;
    use crate::proxy::headers::REPLAYED;

    /// A replay of 100 bytes of `content_type`.
    fn replay(content_type: &'static str) -> Response {
        let mut response = Response::new(axum::body::Body::from(vec![0u8; 100]));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
        response
    }

    #[test]
    fn a_replay_that_does_not_fit_is_refused_as_what_it_replays() {
        let budget = Arc::new(ByteBudget::new(10));
        let grpc = settle(&budget, replay("application/grpc"));
        assert_eq!(grpc.status(), StatusCode::OK);
        assert_eq!(grpc.headers()["grpc-status"], "14", "UNAVAILABLE");
        let message = grpc.headers()["grpc-message"].to_str().unwrap();
        assert!(message.starts_with("overloaded: "), "{message}");
        let http = settle(&budget, replay("application/json"));
        assert_eq!(http.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http.headers()[CONTENT_TYPE], "application/problem+json");
    }
}
