//! Listeners and the connection loop: hyper HTTP/1 with a header-read timeout, a
//! bounded request head and lingering close for bodies answered early
//! ([`crate::http::linger`]), and graceful shutdown (stop accepting, drain in-flight
//! requests and detached tasks within `server.shutdown_grace`).
//!
//! Limits (on the proxy listener; the admin listener only has the write timeout):
//! - `server.max_connections`: at the limit the loop stops accepting, so new
//!   connections wait in the kernel's accept queue, unserved and costing this process
//!   nothing, until a connection closes. A load balancer sees a slow connect, or once
//!   the queue is full a connect timeout, which it retries elsewhere safely since
//!   nothing was sent (a connection accepted and closed would instead fail a request
//!   it had already sent, which most balancers do not retry).
//! - `server.max_in_flight` and `server.buffer_budget`: [`crate::http::limits`].
//! - `server.write_timeout`: [`write_timeout`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::metrics::Counter;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::app::App;
use crate::config::ServerConfig;
use crate::http::limits::{overloaded, Limits, ResponseBody};
use crate::http::linger::{LingerBounds, Lingering};
use crate::http::{admin_router, proxy_router};
use crate::metrics::{self, Limit};
use crate::proxy::headers::X_REQUEST_ID;

pub mod workers;
pub mod write_timeout;

use write_timeout::WriteTimeout;

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
        let Self {
            app,
            proxy,
            admin,
            gate,
            worker,
        } = self;
        let limits = app.config.server.clone();
        // Owned here and only lent to the accept loops, which run inside this future:
        // `shutdown()` below consumes this very value, so the drain of the connections
        // it watches cannot be skipped or run on a stand-in.
        let graceful = GracefulShutdown::new();
        tracing::info!(listen = %limits.listen, admin = %limits.admin_listen, worker, "idemgate serving");
        // One completer per process (worker 0's), as one reaper; stopped with the server.
        let completer = (worker == 0)
            .then(|| crate::completer::spawn(app.clone()))
            .flatten();
        {
            let accepted = workers::accepted_counter(worker);
            let admin = admin.map(|admin| {
                let router = admin_router(app.clone());
                async {
                    // One admin listener per process, and with it the gauges' sampler.
                    tokio::join!(
                        accept_loop(admin, router, &limits, &graceful, None, None),
                        gate.sample()
                    )
                    .0
                }
            });
            let accepting = async {
                tokio::join!(
                    accept_loop(
                        proxy,
                        proxy_router(app.clone()),
                        &limits,
                        &graceful,
                        Some(&gate),
                        Some(accepted),
                    ),
                    async {
                        match admin {
                            Some(admin) => admin.await,
                            None => std::future::pending().await,
                        }
                    },
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
        if let Some(completer) = completer {
            // Attempts already running are tracked in `app.tasks`, awaited below.
            completer.abort();
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

/// The proxy listener's limits: connection slots, and those of each request (one for
/// the process: the `thread_per_core` workers share it).
struct ProxyLimits {
    max_connections: usize,
    slots: Arc<Semaphore>,
    waited: Counter,
    requests: Arc<Limits>,
}

impl ProxyLimits {
    fn new(server: &ServerConfig) -> Self {
        Self {
            max_connections: server.max_connections,
            slots: Arc::new(Semaphore::new(server.max_connections)),
            waited: Limit::MaxConnections.counter(),
            requests: Arc::new(Limits::from_config(server)),
        }
    }

    /// A slot for an accepted connection: at once, or when a connection closes (the
    /// next connections meanwhile wait in the kernel's accept queue).
    async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        self.waited.increment(1);
        tracing::debug!(
            max_connections = self.max_connections,
            "server.max_connections reached: not accepting until a connection closes"
        );
        // Never closed, so this waits for a slot.
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Publishes the gauges every second, off the request path.
    async fn sample(&self) -> Infallible {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            let open = (self.max_connections).saturating_sub(self.slots.available_permits());
            metrics::limits_sampled(open, self.requests.budget.used());
        }
    }
}

/// Accepts connections until dropped (at shutdown); each is served on a task of its own,
/// watched by `graceful`. With `proxy`, its limits apply.
async fn accept_loop(
    listener: TcpListener,
    router: Router,
    server: &ServerConfig,
    graceful: &GracefulShutdown,
    proxy: Option<&ProxyLimits>,
    accepted: Option<Counter>,
) -> Infallible {
    let max_buf = (server.max_header_size.as_u64() as usize).max(8192);
    let linger = LingerBounds::from_config(server);
    let timed_out = Limit::WriteTimeout.counter();
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
        if let Some(accepted) = &accepted {
            accepted.increment(1);
        }
        let slot = match proxy {
            Some(proxy) => proxy.slot().await,
            None => None,
        };
        let _ = stream.set_nodelay(true);
        let io = WriteTimeout::new(stream, server.write_timeout, timed_out.clone());
        let router = router.clone();
        let requests = proxy.map(|p| p.requests.clone());
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(ConnectInfo(peer));
            let admitted = match &requests {
                Some(limits) => limits.enter().map(Some),
                None => Ok(None),
            };
            if admitted.is_ok() {
                if let Some(limits) = &requests {
                    parts.extensions.insert(limits.budget.clone());
                }
            }
            let body = Body::new(Lingering::new(body, &parts.headers, linger));
            let request = hyper::Request::from_parts(parts, body);
            let router = router.clone();
            async move {
                let in_flight = match admitted {
                    Ok(in_flight) => in_flight,
                    // The body is dropped unread: lingering close drains it.
                    Err(problem) => {
                        let id = request.headers().get(&X_REQUEST_ID).cloned();
                        return Ok(overloaded(problem, id));
                    }
                };
                let response = router.oneshot(request).await?;
                Ok::<_, Infallible>(match in_flight {
                    Some(in_flight) => in_flight.limits().settle(response),
                    None => response.map(ResponseBody::plain),
                })
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(server.header_read_timeout)
            .max_buf_size(max_buf)
            .serve_connection(TokioIo::new(io), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
