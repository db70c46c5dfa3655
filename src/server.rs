//! Listeners and the connection loop: hyper HTTP/1 with a header-read timeout, a
//! bounded request head and lingering close for bodies answered early
//! ([`crate::http::linger`]), and graceful shutdown (stop accepting, drain in-flight
//! requests and detached tasks within `server.shutdown_grace`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::app::App;
use crate::config::ServerConfig;
use crate::http::linger::{LingerBounds, Lingering};
use crate::http::{admin_router, proxy_router};

/// A gateway with its listeners bound, ready to run.
pub struct Server {
    app: Arc<App>,
    proxy: TcpListener,
    admin: TcpListener,
}

impl Server {
    /// Binds `server.listen` and `server.admin_listen`.
    pub async fn bind(app: App) -> anyhow::Result<Self> {
        let proxy = TcpListener::bind(&app.config.server.listen)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot listen on server.listen {}: {e}",
                    app.config.server.listen
                )
            })?;
        let admin = TcpListener::bind(&app.config.server.admin_listen)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot listen on server.admin_listen {}: {e}",
                    app.config.server.admin_listen
                )
            })?;
        Ok(Self::with_listeners(app, proxy, admin))
    }

    /// Uses listeners bound by the caller (tests bind port 0).
    pub fn with_listeners(app: App, proxy: TcpListener, admin: TcpListener) -> Self {
        Self {
            app: Arc::new(app),
            proxy,
            admin,
        }
    }

    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy.local_addr().expect("bound listener")
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.local_addr().expect("bound listener")
    }

    /// Serves until `shutdown` resolves, then drains within `server.shutdown_grace`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self { app, proxy, admin } = self;
        let limits = app.config.server.clone();
        // Owned here and only lent to the accept loops, which run inside this future:
        // `shutdown()` below consumes this very value, so the drain of the connections
        // it watches cannot be skipped or run on a stand-in.
        let graceful = GracefulShutdown::new();
        tracing::info!(listen = %limits.listen, admin = %limits.admin_listen, "idemgate serving");
        {
            let accepting = async {
                tokio::join!(
                    accept_loop(proxy, proxy_router(app.clone()), &limits, &graceful),
                    accept_loop(admin, admin_router(app.clone()), &limits, &graceful),
                )
            };
            tokio::select! {
                never = accepting => match never.0 {},
                () = shutdown => {}
            }
            // The listeners are dropped with `accepting`: no new connections.
        }
        let started = Instant::now();
        tracing::info!(
            grace = ?limits.shutdown_grace,
            connections = graceful.count(),
            "shutting down: no new connections; draining"
        );
        if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after shutdown_grace; closing them");
        }
        app.tasks.close();
        let left = limits.shutdown_grace.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, app.tasks.wait()).await.is_err() {
            tracing::warn!(
                tasks = app.tasks.len(),
                "upstream calls still running after shutdown_grace"
            );
        }
        app.stores.close(started, limits.shutdown_grace).await;
        tracing::info!("stopped");
    }
}

/// Accepts connections until dropped (at shutdown); each is served on a task of its own,
/// watched by `graceful`.
async fn accept_loop(
    listener: TcpListener,
    router: Router,
    limits: &ServerConfig,
    graceful: &GracefulShutdown,
) -> Infallible {
    let max_buf = (limits.max_header_size.as_u64() as usize).max(8192);
    let linger = LingerBounds::from_config(limits);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(ConnectInfo(peer));
            let body = Body::new(Lingering::new(body, &parts.headers, linger));
            router
                .clone()
                .oneshot(hyper::Request::from_parts(parts, body))
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(max_buf)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
