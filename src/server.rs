//! Listeners and shutdown: hyper HTTP/1 with a header-read timeout, a bounded request
//! head and lingering close for bodies answered early ([`layers::linger`]), and
//! graceful shutdown (stop accepting, then [`shutdown`]: finish, settle and close
//! within `server.shutdown_grace`).
//!
//! A listener accepts ([`accept`]), wraps each connection in its layers and serves it
//! ([`connection`]: composed there, one folder each under [`layers`]).
//!
//! With `[server.tls]` the proxy listener serves TLS only ([`handshake`]), its
//! certificate reloaded on SIGHUP or when its files change (`crate::tls::listener`);
//! the admin listener stays plain.
//!
//! Limits (on the proxy listener; the admin listener only has the write timeout):
//! - `server.max_connections`: [`proxy_limits`].
//! - `server.max_concurrent_requests`: [`layers::in_flight`]; `server.buffer_budget`:
//!   [`layers::budget`].
//! - `server.write_timeout`: [`layers::write_timeout`]; on HTTP/2, per answer too
//!   ([`conn_limits`]).
//! - `server.connection_share`, `server.idle_timeout`, `server.http2_max_reset_streams`:
//!   each connection's own limits ([`conn_limits`]), applied by its [`driver`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::app::App;

mod accept;
pub mod conn_limits;
mod connection;
mod driver;
mod handshake;
pub mod layers;
mod preface;
mod proxy_limits;
mod shutdown;
pub mod workers;

use accept::{accept_loop, accepted_counter};
use connection::Connections;
use driver::Draining;
use proxy_limits::ProxyLimits;

/// A gateway with its listeners bound, ready to run.
pub struct Server {
    app: Arc<App>,
    proxy: TcpListener,
    /// `None` on the `thread_per_core` workers other than the first.
    admin: Option<TcpListener>,
    /// Shared by every worker of a `thread_per_core` process.
    gate: Arc<ProxyLimits>,
    /// Which worker's listener this is (0 with `multi_thread`).
    worker: usize,
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
        let gate = Arc::new(ProxyLimits::new(&app.config.server));
        Self {
            app: Arc::new(app),
            proxy,
            admin: Some(admin),
            gate,
            worker: 0,
        }
    }

    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy.local_addr().expect("bound listener")
    }

    /// The admin listener's address (`None` on a `thread_per_core` worker without it).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        (self.admin.as_ref()).map(|a| a.local_addr().expect("bound listener"))
    }

    /// Serves until `shutdown` resolves, then drains within `server.shutdown_grace`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let app = self.app.clone();
        let server = &app.config.server;
        // Owned here and only lent to the accept loops, which run inside this future:
        // `shutdown()` below consumes this very value, so the drain of the connections
        // it watches cannot be skipped or run on a stand-in.
        let draining = Draining::default();
        let tls = app.listener_cert.is_some();
        tracing::info!(listen = %server.listen, admin = %server.admin_listen, tls, worker = self.worker, "idemgate serving");
        // One completer per process (worker 0's), as one reaper; stopped with the server.
        let completer = (self.worker == 0)
            .then(|| crate::completer::spawn(app.clone()))
            .flatten();
        // `[server.tls]`: one watcher per process (worker 0's) reloads the certificate.
        let reloads = (app.listener_cert.clone())
            .filter(|_| self.worker == 0)
            .map(|cert| tokio::spawn(cert.watch()));
        tokio::select! {
            never = self.accept(&draining) => match never {},
            () = shutdown => {}
        }
        // The listeners were dropped with `accept`: no new connections.
        if let Some(reloads) = reloads {
            reloads.abort();
        }
        shutdown::stop(&app, &draining, completer, server.shutdown_grace).await;
    }

    /// Accepts on the proxy listener and, if this server has it, the admin listener
    /// (with the gauges' sampler), until dropped.
    async fn accept(self, draining: &Draining) -> Infallible {
        let Self {
            app,
            proxy,
            admin,
            gate,
            worker,
        } = self;
        let accepted = accepted_counter(worker);
        let admin = async {
            let Some(admin) = admin else {
                return std::future::pending().await;
            };
            let connections = Connections::admin(app.clone());
            let serve = |stream, peer| connections.serve(stream, peer, draining);
            // One admin listener per process, and with it the gauges' sampler.
            tokio::join!(accept_loop(admin, serve, None, None), gate.sample()).0
        };
        let connections = Connections::proxy(app.clone(), &gate);
        let serve = |stream, peer| connections.serve(stream, peer, draining);
        let proxy = accept_loop(proxy, serve, Some(&gate), Some(accepted));
        tokio::join!(proxy, admin).0
    }
}
