//! The accept loop: accept a connection, take a connection slot on the proxy
//! listener ([`ProxyLimits::slot`]), serve the connection on a task of its own.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use ::metrics::Counter;
use tokio::net::{TcpListener, TcpStream};

use super::driver::BoxError;
use super::proxy_limits::ProxyLimits;

/// Connections accepted by each worker's proxy listener.
const ACCEPTED: &str = "idemgate_worker_connections_accepted_total";

/// The counter of connections accepted by `worker`'s proxy listener.
pub(super) fn accepted_counter(worker: usize) -> Counter {
    ::metrics::describe_counter!(
        ACCEPTED,
        "Connections accepted, by worker (one worker with server.runtime = \"multi_thread\")."
    );
    ::metrics::counter!(ACCEPTED, "worker" => worker.to_string())
}

/// Accepts connections until dropped (at shutdown); `serve` serves each (on a task of
/// its own). With `gate`, each connection first takes one of its slots.
pub(super) async fn accept_loop<F>(
    listener: TcpListener,
    serve: impl Fn(TcpStream, SocketAddr) -> F,
    gate: Option<&ProxyLimits>,
    accepted: Option<Counter>,
) -> Infallible
where
    F: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    loop {
        let (stream, peer) = accept(&listener).await;
        if let Some(accepted) = &accepted {
            accepted.increment(1);
        }
        let slot = match gate {
            Some(gate) => gate.slot().await,
            None => None,
        };
        let connection = serve(stream, peer);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}

/// The next connection; when accepting fails (typically EMFILE), backs off instead of
/// spinning.
async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(pair) => return pair,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}
