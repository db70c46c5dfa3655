//! How a listener serves a connection, composed in one place ([`Connections`]): the
//! connection-level layer on its socket ([`WriteTimeoutLayer`]), hyper's HTTP/1
//! settings (a header-read timeout, a request head of at most
//! `server.max_header_size`), the peer's address for the handlers, and the request
//! layers around the listener's router, outermost first: lingering close, then on the
//! proxy listener `server.max_in_flight` and `server.buffer_budget`
//! ([`super::layers`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::{Extension, Router};
use http::Request;
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpStream;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use super::layers::budget::{BudgetLayer, Budgeted};
use super::layers::in_flight::{Admit, InFlightLayer};
use super::layers::linger::{Linger, LingerBounds, LingerLayer};
use super::layers::write_timeout::WriteTimeoutLayer;
use super::proxy_limits::ProxyLimits;
use crate::app::App;
use crate::config::ServerConfig;
use crate::http::{admin_router, proxy_router};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The proxy listener's request layers around the gateway.
pub(super) type ProxyService = Linger<Admit<Budgeted<Router>>>;

/// The admin listener's request layers around its router.
pub(super) type AdminService = Linger<Router>;

/// What a listener does with each connection it accepts.
pub(super) struct Connections<S> {
    write_timeout: WriteTimeoutLayer,
    header_read_timeout: Duration,
    max_buf: usize,
    /// The router inside its request layers.
    service: S,
}

impl Connections<ProxyService> {
    /// The proxy listener's: every layer, the limits of `gate`.
    pub(super) fn proxy(app: Arc<App>, gate: &ProxyLimits) -> Self {
        let server = app.config.server.clone();
        let service = ServiceBuilder::new()
            .layer(LingerLayer::new(LingerBounds::from_config(&server)))
            .layer(InFlightLayer::new(gate.in_flight.clone()))
            .layer(BudgetLayer::new(gate.budget.clone()))
            .service(proxy_router(app));
        Self::new(&server, service)
    }
}

impl Connections<AdminService> {
    /// The admin listener's: the write timeout and lingering close only.
    pub(super) fn admin(app: Arc<App>) -> Self {
        let server = app.config.server.clone();
        let service = LingerLayer::new(LingerBounds::from_config(&server)).layer(admin_router(app));
        Self::new(&server, service)
    }
}

impl<S> Connections<S> {
    fn new(server: &ServerConfig, service: S) -> Self {
        Self {
            write_timeout: WriteTimeoutLayer::from_config(server),
            header_read_timeout: server.header_read_timeout,
            max_buf: (server.max_header_size.as_u64() as usize).max(8192),
            service,
        }
    }
}

impl<S, B> Connections<S>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
    S: Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// Serves the connection on `stream` from `peer` until it closes, watched by
    /// `graceful`.
    pub(super) fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        graceful: &GracefulShutdown,
    ) -> impl Future<Output = hyper::Result<()>> + Send + 'static {
        let _ = stream.set_nodelay(true);
        let io = self.write_timeout.wrap(stream);
        let service = Extension(ConnectInfo(peer)).layer(self.service.clone());
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            service.clone().oneshot(request)
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .max_buf_size(self.max_buf)
            .serve_connection(TokioIo::new(io), service);
        graceful.watch(connection)
    }
}
