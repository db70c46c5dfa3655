//! A connection's driver ([`drive`]): serves the connection until it ends; tells it to
//! go away (HTTP/2 `GOAWAY`; HTTP/1.1: close once the request in progress is answered)
//! when the process stops or its limits say so ([`ConnLimits::check`]: idle for
//! `server.idle_timeout`, an answer stalled for `server.write_timeout`, too many
//! streams reset); and closes it when, told to go by its limits, it has had nothing
//! open for `server.write_timeout` (its requests still running end within their own
//! bounds). Also the process's set of connections for the stop ([`Draining`]: told to go
//! away, waited for, closed).

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn_limits::{ConnLimits, Verdict};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connections of a process: each served one is tracked, told to go away when the
/// process stops, and closed when the stop has no more time for it.
#[derive(Clone, Default)]
pub(super) struct Draining {
    stop: CancellationToken,
    /// Closes every connection still open, whatever it is doing.
    close: CancellationToken,
    tracker: TaskTracker,
}

impl Draining {
    /// Connections being served.
    pub(super) fn count(&self) -> usize {
        self.tracker.len()
    }

    /// Tells every connection to go away (HTTP/2 `GOAWAY`; HTTP/1.1: close once the
    /// request in progress is answered); returns at once.
    pub(super) fn go_away(&self) {
        self.stop.cancel();
        self.tracker.close();
    }

    /// Waits until every connection has ended (once told to go away).
    pub(super) async fn ended(&self) {
        self.tracker.wait().await;
    }

    /// Closes the connections still open, and waits until their tasks have let go.
    pub(super) async fn close(&self) {
        self.close.cancel();
        self.ended().await;
    }
}

/// Serves `conn` until it ends. `go_away` starts its graceful shutdown; `limits` say
/// when to call it.
pub(super) async fn drive<C>(
    conn: C,
    go_away: impl Fn(Pin<&mut C>),
    limits: Arc<ConnLimits>,
    draining: &Draining,
) -> Result<(), BoxError>
where
    C: Future<Output = Result<(), BoxError>>,
{
    let (stop, close) = (draining.stop.clone(), draining.close.clone());
    draining
        .tracker
        .track_future(async move {
            let mut conn = pin!(conn);
            let mut told = false;
            loop {
                let wake = match limits.check() {
                    Verdict::Serve(at) => at,
                    Verdict::Leave(at) => {
                        if !std::mem::replace(&mut told, true) {
                            go_away(conn.as_mut());
                        }
                        at
                    }
                    Verdict::Close => {
                        tracing::debug!(
                            "connection told to go away idle or stalled for write_timeout; closing"
                        );
                        return Ok(());
                    }
                };
                tokio::select! {
                    done = conn.as_mut() => return done,
                    () = stop.cancelled(), if !told => {
                        told = true;
                        go_away(conn.as_mut());
                    }
                    () = limits.changed() => {}
                    () = sleep_until(wake) => {}
                    () = close.cancelled() => return Ok(()),
                }
            }
        })
        .await
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
