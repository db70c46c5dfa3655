//! `server.runtime = "thread_per_core"`: `server.workers` OS threads, each running a
//! single-threaded tokio runtime with its own [`App`] (Redis and Postgres connections,
//! waiter subscription, upstream client) and its own proxy listener bound with
//! `SO_REUSEPORT`, so the kernel spreads connections over the workers and a request is
//! served start to end on one thread, with no cross-thread wake-ups (the way nginx
//! workers run) but for its Postgres write-through and cold lookup, which go to the
//! shared batchers.
//!
//! Shared by the workers: the metrics recorder, the replay cache (a concurrent map, no
//! wake-ups), the proxy listener's limits (`max_connections`, `max_concurrent_requests`
//! and `buffer_budget` stay limits of the process), the listener's TLS certificate
//! (reloaded by worker 0) and the Postgres write-through and lookup batchers
//! ([`Batchers`]: one statement for the records of every worker, as in `multi_thread`;
//! their tasks run on worker 0). Worker 0 also runs the admin listener, whose `/readyz`
//! reports worker 0's view of the stores, the reaper and the metrics upkeep, and migrates
//! Postgres before the others start.
//!
//! Shutdown: [`Workers::stop`] tells every worker at once; each stops accepting and
//! drains its own connections and upstream calls within `server.shutdown_grace`, as the
//! `multi_thread` server does ([`Server::run`]); worker 0 then keeps its runtime (and
//! so the batchers) running until every other worker has drained; [`Workers::join`]
//! waits for all.
//!
//! Note: any process of the same user may also bind the port with `SO_REUSEPORT` and
//! receive a share of its connections; run one gateway per port.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use anyhow::Context;
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use super::proxy_limits::ProxyLimits;
use super::Server;
use crate::app::{App, Batchers, WorkerPart};
use crate::config::{worker_share, Config};
use crate::store::memory::ReplayCache;
use crate::tls::listener::ListenerCert;

/// Running workers.
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
    /// Cancelled once every worker is bound: then they serve (so `/readyz`, on worker
    /// 0, answers only once all the listeners are up).
    go: CancellationToken,
    stop: CancellationToken,
    proxy: SocketAddr,
    admin: SocketAddr,
}

/// What a worker reports once it serves (or why it cannot).
type Started = anyhow::Result<(SocketAddr, Option<SocketAddr>)>;

impl Workers {
    /// Starts `server.workers` workers, one after another (worker 0 first: it migrates
    /// and binds the ports the others share), and returns once all of them serve, or
    /// the first error after stopping those already started.
    pub fn start(config: Config) -> anyhow::Result<Self> {
        let count = config.server.workers.get();
        // Before any handle is registered, so the shared limits' counters are real.
        crate::metrics::install();
        let gate = Arc::new(ProxyLimits::new(&config.server));
        let rc = &config.replay_cache;
        let cache = ReplayCache::new(rc.max_bytes.as_u64(), rc.max_age).map(Arc::new);
        let batchers: Arc<OnceLock<Batchers>> = Arc::default();
        let listener_cert = ListenerCert::load(&config.server.tls)?;
        // Closed at once: its wait ends when every worker's token is dropped.
        let serving = TaskTracker::new();
        serving.close();
        let mut workers = Self {
            threads: Vec::with_capacity(count),
            go: CancellationToken::new(),
            stop: CancellationToken::new(),
            proxy: config.server.listen,
            admin: config.server.admin_listen,
        };
        for index in 0..count {
            let (started, on_start) = mpsc::channel::<Started>();
            let mut share = worker_share(&config, index, count);
            share.server.listen = workers.proxy;
            let part = WorkerPart {
                index,
                cache: cache.clone(),
                batchers: batchers.clone(),
                listener_cert: listener_cert.clone(),
            };
            let (gate, go, stop) = (gate.clone(), workers.go.clone(), workers.stop.clone());
            let serving = (serving.token(), serving.clone());
            let thread = std::thread::Builder::new()
                .name(format!("idemgate-worker-{index}"))
                .spawn(move || run_worker(share, part, gate, (go, stop), serving, started))
                .context("starting a worker thread")?;
            workers.threads.push(thread);
            let outcome = on_start
                .recv()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("worker {index} ended while starting")));
            match outcome {
                Ok((proxy, admin)) => {
                    workers.proxy = proxy;
                    if let Some(admin) = admin {
                        workers.admin = admin;
                    }
                }
                Err(e) => {
                    workers.stop();
                    workers.join();
                    return Err(e.context(format!("starting worker {index} of {count}")));
                }
            }
        }
        workers.go.cancel();
        tracing::info!(workers = count, listen = %workers.proxy, "thread_per_core: all workers serving");
        Ok(workers)
    }

    /// The proxy listeners' shared address.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy
    }

    /// The admin listener's address (on worker 0).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// Tells every worker to stop accepting and drain (SIGTERM).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until every worker has drained and stopped.
    pub fn join(self) {
        for thread in self.threads {
            if thread.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

/// One worker: its runtime, app and listeners, serving until `stop`. `serving` holds
/// the worker's token (dropped once it has drained) and the tracker worker 0 waits
/// on before its runtime, which runs the shared batchers, ends.
fn run_worker(
    config: Config,
    part: WorkerPart,
    gate: Arc<ProxyLimits>,
    (go, stop): (CancellationToken, CancellationToken),
    (token, serving): (TaskTrackerToken, TaskTracker),
    started: mpsc::Sender<Started>,
) {
    let index = part.index;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = started.send(Err(anyhow::Error::new(e).context("starting the runtime")));
            return;
        }
    };
    runtime.block_on(async move {
        let server = match bind(config, part, gate).await {
            Ok(server) => server,
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
        let _ = started.send(Ok((server.proxy_addr(), server.admin_addr())));
        // Connections meanwhile wait in the listener's accept queue.
        tokio::select! {
            () = go.cancelled() => {}
            () = stop.cancelled() => {}
        }
        server.run(stop.cancelled_owned()).await;
        drop(token);
        if index == 0 {
            // The other workers' last write-throughs go through its batchers.
            serving.wait().await;
        }
        tracing::debug!(worker = index, "worker stopped");
    });
}

/// Builds the worker's app and binds its listeners (the admin one on worker 0).
async fn bind(config: Config, part: WorkerPart, gate: Arc<ProxyLimits>) -> anyhow::Result<Server> {
    let index = part.index;
    let listen = config.server.listen;
    let admin_listen = config.server.admin_listen;
    let app = App::build_worker(config, part)
        .await
        .context("building the gateway")?;
    let proxy = bind_reuseport(listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on server.listen {listen}: {e}"))?;
    let admin = match index {
        0 => Some(TcpListener::bind(admin_listen).await.map_err(|e| {
            anyhow::anyhow!("cannot listen on server.admin_listen {admin_listen}: {e}")
        })?),
        _ => None,
    };
    Ok(Server {
        app: Arc::new(app),
        proxy,
        admin,
        gate,
        worker: index,
    })
}

/// A listener on `addr` that other sockets with `SO_REUSEPORT` may share.
fn bind_reuseport(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    // mio's (and so tokio's `TcpListener::bind`) backlog.
    socket.listen(1024)
}
