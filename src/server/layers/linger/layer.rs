//! Lingering close as a request layer: every HTTP/1 request body in a [`Lingering`].
//!
//! HTTP/2 streams are left as they are: a stream answered before its body was read is
//! ended by hyper with `RST_STREAM` `NO_ERROR` after the response (RFC 9113, 8.1), which
//! tells the client to stop sending while the connection and its other streams go on;
//! there is no socket to close early, so nothing to linger for.

use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Version};
use hyper::body::Incoming;
use tower::{Layer, Service};

use super::body::Lingering;
use super::LingerBounds;

/// Wraps each HTTP/1 request body of a listener in a [`Lingering`] ([`Linger`]).
#[derive(Debug, Clone, Copy)]
pub struct LingerLayer {
    bounds: LingerBounds,
}

impl LingerLayer {
    pub fn new(bounds: LingerBounds) -> Self {
        Self { bounds }
    }
}

impl<S> Layer<S> for LingerLayer {
    type Service = Linger<S>;

    fn layer(&self, inner: S) -> Linger<S> {
        Linger {
            inner,
            bounds: self.bounds,
        }
    }
}

/// `inner`, given each request with its body in a [`Lingering`].
#[derive(Clone)]
pub struct Linger<S> {
    inner: S,
    bounds: LingerBounds,
}

impl<S> Service<Request<Incoming>> for Linger<S>
where
    S: Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Incoming>) -> S::Future {
        let (parts, body) = request.into_parts();
        let body = if parts.version == Version::HTTP_2 {
            Body::new(body)
        } else {
            Body::new(Lingering::new(body, &parts.headers, self.bounds))
        };
        self.inner.call(Request::from_parts(parts, body))
    }
}
