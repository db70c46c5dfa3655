//! The admin listener's requests kept open on their connection until their answer is
//! dropped, so that `server.idle_timeout` never counts an admin connection in use as
//! idle (on the proxy listener, [`super::in_flight`] keeps them open).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use tower::{Layer, Service};

use super::budget::ResponseBody;
use crate::server::conn_limits::ConnLimits;

/// Keeps each request open ([`KeepOpen`]).
#[derive(Clone, Copy, Default)]
pub struct OpenLayer;

impl<S> Layer<S> for OpenLayer {
    type Service = KeepOpen<S>;

    fn layer(&self, inner: S) -> KeepOpen<S> {
        KeepOpen { inner }
    }
}

/// `inner`, each request open on its connection (the `ConnLimits` in its extensions)
/// from its arrival until its answer's body is dropped (the body holds it, as the
/// proxy listener's answers do: [`ResponseBody::keeping`]).
#[derive(Clone)]
pub struct KeepOpen<S> {
    inner: S,
}

type Answer<E> = Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, E>> + Send>>;

impl<S, B> Service<Request<B>> for KeepOpen<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let open = (request.extensions().get::<Arc<ConnLimits>>()).map(|conn| conn.open());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                let body = ResponseBody::plain(body);
                match open {
                    Some(open) => body.keeping(open),
                    None => body,
                }
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower::ServiceExt;

    use super::*;
    use crate::budget::ByteBudget;
    use crate::config::ServerConfig;
    use crate::server::conn_limits::Verdict;

    #[tokio::test]
    async fn a_request_is_open_until_its_answer_is_dropped() {
        let server = ServerConfig {
            idle_timeout: Duration::from_millis(200),
            ..ServerConfig::default()
        };
        let conn = Arc::new(ConnLimits::new(&server, &Arc::new(ByteBudget::new(0))));
        let service = OpenLayer.layer(tower::service_fn(|_: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Body::from("ok")))
        }));
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(conn.clone());
        let answer = service.oneshot(request).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            matches!(conn.check(), Verdict::Serve(_)),
            "its answer is still held: past idle_timeout, not idle"
        );
        drop(answer);
        assert!(
            matches!(conn.check(), Verdict::Serve(Some(_))),
            "idle from now"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            matches!(conn.check(), Verdict::Leave(_)),
            "idle for idle_timeout since its answer was dropped"
        );
    }
}
