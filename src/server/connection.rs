//! How a listener serves a connection, composed in one place ([`Connections`]): the
//! connection-level layer on its socket ([`WriteTimeoutLayer`]), hyper-util's auto
//! connection builder (HTTP/1.1, or HTTP/2 when the connection opens with the h2c
//! preface: prior knowledge), its HTTP/1 settings (a header-read timeout, a request head
//! of at most `server.max_header_size`) and HTTP/2 ones (`server.http2_*`, a header list
//! of at most `server.max_header_size`), the peer's address for the handlers, and the
//! request layers around the listener's router, outermost first: lingering close
//! (HTTP/1 only), then on the proxy listener `server.max_in_flight` and
//! `server.buffer_budget` ([`super::layers`]). An HTTP/2 stream meets the request layers
//! as an HTTP/1.1 request does.
//!
//! With `[server.tls]` the proxy listener serves TLS only: the TLS stream runs over the
//! write-timeout socket (so the timeout bounds the encrypted writes), after a handshake
//! bounded by `server.header_read_timeout` ([`super::handshake`]), and the builder serves
//! the protocol ALPN chose (`h2`: HTTP/2 only; else HTTP/1.1 only).

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
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use super::handshake;
use super::layers::budget::{BudgetLayer, Budgeted};
use super::layers::in_flight::{Admit, InFlightLayer};
use super::layers::linger::{Linger, LingerBounds, LingerLayer};
use super::layers::write_timeout::WriteTimeoutLayer;
use super::proxy_limits::ProxyLimits;
use crate::app::App;
use crate::config::ServerConfig;
use crate::http::{admin_router, proxy_router};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The proxy listener's request layers around the gateway.
pub(super) type ProxyService = Linger<Admit<Budgeted<Router>>>;

/// The admin listener's request layers around its router.
pub(super) type AdminService = Linger<Router>;

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
            ..Self::new(&server, service)
        }
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
            builder: builder(server),
            header_read_timeout: server.header_read_timeout,
            service,
            tls: None,
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
    /// Serves the connection on `stream` from `peer` until it closes, watched by
    /// `graceful`.
    pub(super) fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        graceful: &GracefulShutdown,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 'static {
        let _ = stream.set_nodelay(true);
        let service = Extension(ConnectInfo(peer)).layer(self.service.clone());
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            service.clone().oneshot(request)
        });
        let (write_timeout, builder) = (self.write_timeout.clone(), self.builder.clone());
        let header_read_timeout = self.header_read_timeout;
        let watcher = graceful.watcher();
        let tls = self.tls.clone();
        async move {
            let Some(tls) = tls else {
                if !protocol_known(&stream, header_read_timeout).await {
                    return Ok(());
                }
                let io = write_timeout.wrap(stream);
                let connection = builder.serve_connection(TokioIo::new(io), service);
                return watcher.watch(connection.into_owned()).await;
            };
            let io = write_timeout.wrap(stream);
            let Some(accepted) = handshake::accept(&tls, io, header_read_timeout).await else {
                return Ok(());
            };
            let builder = if accepted.h2 {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            let connection = builder.serve_connection(TokioIo::new(accepted.io), service);
            watcher.watch(connection.into_owned()).await
        }
    }
}

/// Waits, at most `within`, until the client has sent enough to tell HTTP/1 from the
/// HTTP/2 preface (or closed). hyper-util's version detection has no timeout of its
/// own and hyper's header-read timeout starts after it, so without this a connection
/// that stays silent, or stops partway through the preface, would hold its
/// `max_connections` slot for ever. False: the client was too slow; drop it.
async fn protocol_known(stream: &TcpStream, within: Duration) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let known = async {
        let mut buf = [0u8; PREFACE.len()];
        loop {
            match stream.peek(&mut buf).await {
                Ok(n) if n == 0 || n == PREFACE.len() || buf[..n] != PREFACE[..n] => return,
                Err(_) => return,
                // Part of the preface: wait for the rest.
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    tokio::time::timeout(within, known).await.is_ok()
}
