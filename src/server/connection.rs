//! How a listener serves a connection, composed in one place ([`Connections`]): the
//! connection-level layer on its socket ([`WriteTimeoutLayer`]), hyper-util's auto
//! connection builder (HTTP/1.1, or HTTP/2 when the connection opens with the h2c
//! preface: prior knowledge), its HTTP/1 settings (a header-read timeout, a request head
//! of at most `server.max_header_size`) and HTTP/2 ones (`server.http2_*`, a header list
//! of at most `server.max_header_size`), the peer's address for the handlers, and the
//! request layers around the listener's router, outermost first: lingering close
//! (HTTP/1 only), then on the proxy listener `server.max_concurrent_requests` and
//! `server.buffer_budget` ([`super::layers`]). An HTTP/2 stream meets the request layers
//! as an HTTP/1.1 request does.
//!
//! With `[server.tls]` the proxy listener serves TLS only: the TLS stream runs over the
//! write-timeout socket (so the timeout bounds the encrypted writes), after a handshake
//! bounded by `server.header_read_timeout` ([`super::handshake`]), and the builder serves
//! the protocol ALPN chose (`h2`: HTTP/2 only; else HTTP/1.1 only).
//!
//! Each connection has its own limits ([`ConnLimits`]: its share of the listener's,
//! its idle time, its resets, its HTTP/2 answers being sent; an admin connection's
//! idle time only), given to its requests as an extension and to its driver
//! ([`super::driver`]), which serves it and closes it when they say so. The first bytes of a connection must come within
//! `server.header_read_timeout` ([`Preface`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::{Extension, Router};
use http::Request;
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use super::conn_limits::ConnLimits;
use super::driver::{drive, BoxError, Draining};
use super::handshake;
use super::layers::budget::{BudgetLayer, Budgeted};
use super::layers::in_flight::{Admit, InFlightLayer};
use super::layers::linger::{Linger, LingerBounds, LingerLayer};
use super::layers::open::{KeepOpen, OpenLayer};
use super::layers::write_timeout::WriteTimeoutLayer;
use super::preface::Preface;
use super::proxy_limits::ProxyLimits;
use crate::app::App;
use crate::budget::ByteBudget;
use crate::config::ServerConfig;
use crate::http::{admin_router, proxy_router};

/// The proxy listener's request layers around the gateway.
pub(super) type ProxyService = Linger<Admit<Budgeted<Router>>>;

/// The admin listener's request layers around its router.
pub(super) type AdminService = Linger<KeepOpen<Router>>;

/// What a listener does with each connection it accepts.
pub(super) struct Connections<S> {
    write_timeout: WriteTimeoutLayer,
    /// HTTP/1.1 and HTTP/2 (prior knowledge), with the `[server]` settings of each.
    builder: auto::Builder<TokioExecutor>,
    /// Also the longest wait for the first bytes that tell the protocol.
    header_read_timeout: Duration,
    /// The router inside its request layers.
    service: S,
    /// With `[server.tls]`, on the proxy listener.
    tls: Option<TlsAcceptor>,
    /// The settings and budget each connection's limits come from (on the admin
    /// listener, only its idle time counts: its requests meet no other limit).
    limits: (Arc<ServerConfig>, Arc<ByteBudget>),
}

impl Connections<ProxyService> {
    /// The proxy listener's: every layer, the limits of `gate`.
    pub(super) fn proxy(app: Arc<App>, gate: &ProxyLimits) -> Self {
        let server = app.config.server.clone();
        let service = ServiceBuilder::new()
            .layer(LingerLayer::new(LingerBounds::from_config(&server)))
            .layer(InFlightLayer::new(gate.in_flight.clone()))
            .layer(BudgetLayer::new(gate.budget.clone()))
            .service(proxy_router(app.clone()));
        let tls = (app.listener_cert.as_ref()).map(|cert| TlsAcceptor::from(cert.server_config()));
        Self {
            tls,
            limits: (Arc::new(server.clone()), gate.budget.clone()),
            ..Self::new(&server, service)
        }
    }
}

impl Connections<AdminService> {
    /// The admin listener's: the write timeout, lingering close, and its requests kept
    /// open on their connection (`server.idle_timeout`).
    pub(super) fn admin(app: Arc<App>) -> Self {
        let server = app.config.server.clone();
        let service = ServiceBuilder::new()
            .layer(LingerLayer::new(LingerBounds::from_config(&server)))
            .layer(OpenLayer)
            .service(admin_router(app));
        Self::new(&server, service)
    }
}

impl<S> Connections<S> {
    fn new(server: &ServerConfig, service: S) -> Self {
        Self {
            write_timeout: WriteTimeoutLayer::from_config(server),
            builder: builder(server),
            header_read_timeout: server.header_read_timeout,
            service,
            tls: None,
            limits: (Arc::new(server.clone()), Arc::new(ByteBudget::new(0))),
        }
    }
}

/// The auto connection builder: HTTP/1.1 unless the connection starts with the HTTP/2
/// preface.
fn builder(server: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let max_header = server.max_header_size.as_u64();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(server.header_read_timeout)
        .max_buf_size((max_header as usize).max(8192));
    let keep_alive = Some(server.http2_keep_alive_interval).filter(|d| !d.is_zero());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(max_header).unwrap_or(u32::MAX))
        .max_concurrent_streams(server.http2_max_concurrent_streams)
        .initial_stream_window_size(window(server.http2_initial_stream_window))
        .initial_connection_window_size(window(server.http2_initial_connection_window))
        .max_pending_accept_reset_streams(server.http2_max_pending_accept_reset_streams)
        .max_local_error_reset_streams(server.http2_max_local_error_reset_streams)
        .keep_alive_interval(keep_alive)
        .keep_alive_timeout(server.http2_keep_alive_timeout);
    builder
}

/// A flow-control window (validated below 2^31 bytes).
fn window(size: bytesize::ByteSize) -> u32 {
    u32::try_from(size.as_u64()).unwrap_or(u32::MAX >> 1)
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
    /// Serves the connection on `stream` from `peer` until it closes, tracked by
    /// `draining`.
    pub(super) fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        draining: &Draining,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 'static {
        let _ = stream.set_nodelay(true);
        let (server, budget) = &self.limits;
        let limits = Arc::new(ConnLimits::new(server, budget));
        let service = Extension(limits.clone()).layer(self.service.clone());
        let service = Extension(ConnectInfo(peer)).layer(service);
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            service.clone().oneshot(request)
        });
        let (write_timeout, builder) = (self.write_timeout.clone(), self.builder.clone());
        let deadline = Instant::now() + self.header_read_timeout;
        let draining = draining.clone();
        let tls = self.tls.clone();
        async move {
            let io = write_timeout.wrap(stream);
            let Some(tls) = tls else {
                let io = Preface::expected(io, deadline);
                let connection = builder.serve_connection(TokioIo::new(io), service);
                let go_away = |c: Pin<&mut _>| auto::Connection::graceful_shutdown(c);
                return drive(connection.into_owned(), go_away, limits, &draining).await;
            };
            let Some(accepted) = handshake::accept(&tls, io, deadline).await else {
                return Ok(());
            };
            let builder = if accepted.h2 {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            let connection = builder.serve_connection(TokioIo::new(accepted.io), service);
            let go_away = |c: Pin<&mut _>| auto::Connection::graceful_shutdown(c);
            drive(connection.into_owned(), go_away, limits, &draining).await
        }
    }
}
