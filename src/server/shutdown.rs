//! The stop (SIGTERM/SIGINT) of a server whose listeners are closed: what happens within
//! `server.shutdown_grace`, in parts that each keep their time, so that no open
//! connection starves the settling of a keyed call ([`stop`]).
//!
//! 1. **Finish.** Connections are told to go away (HTTP/2 `GOAWAY`; HTTP/1.1: closed
//!    once the request in progress is answered) and everything in flight may finish by
//!    itself: buffered and live calls, calls detached after a 504, the completer's
//!    attempts, waiters, joiners, unkeyed exchanges. This part ends when all of it has,
//!    or when only the settling part of the grace is left ([`settling_part`]).
//! 2. **Settle.** What still runs is stopped: each upstream call is cancelled and settles
//!    its key as an unknown outcome (`idempotency.on_ambiguous`: stored, or released),
//!    a live answer's clients see a broken stream, waiters are answered 409
//!    `idempotency_key_in_flight` and joiners cut. The calls are awaited until the end
//!    of the grace, so no lease is left to lapse under a call that may have acted.
//! 3. **Close.** The settled calls' answers get [`FLUSH`] to reach their clients; the
//!    connections still open are then closed, not waited for. Meanwhile the
//!    write-through retry queue is flushed to Postgres, in what is left of the grace
//!    (at least [`FLUSH`]); the stores close last.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use super::driver::Draining;
use crate::app::App;

/// How long settled calls' answers have to reach their clients before the connections
/// still open are closed (within the grace).
pub const FLUSH: Duration = Duration::from_secs(1);

/// The part of `shutdown_grace` kept for settling the calls still running: a quarter of
/// it, at most 5 s.
pub fn settling_part(grace: Duration) -> Duration {
    (grace / 4).min(Duration::from_secs(5))
}

/// Stops a server whose listeners are closed, within `grace` from now: `completer` (if
/// this server runs it) at once, then the parts the module describes.
pub(super) async fn stop(
    app: &App,
    draining: &Draining,
    completer: Option<JoinHandle<()>>,
    grace: Duration,
) {
    let started = Instant::now();
    let end = started + grace;
    let calls_until = end - settling_part(grace);
    tracing::info!(
        grace = ?grace,
        connections = draining.count(),
        calls = app.tasks.len(),
        "shutting down: no new connections; draining"
    );
    draining.go_away();
    if let Some(completer) = completer {
        // Attempts already running are tracked in `app.tasks`, awaited below.
        completer.abort();
    }
    app.tasks.close();
    let everything = async { tokio::join!(app.tasks.wait(), draining.ended()) };
    let settled = timeout_at(calls_until, everything).await.is_ok();
    if !settled {
        settle(app, end).await;
    }
    let left = end.saturating_duration_since(Instant::now()).max(FLUSH);
    let close = async {
        if !settled {
            close(draining).await;
        }
    };
    tokio::join!(close, app.stores.close(left));
    tracing::info!("stopped");
}

/// Part 2: cancels what still runs and awaits the calls' settling until `end`.
async fn settle(app: &App, end: Instant) {
    let calls = app.tasks.len();
    if calls > 0 {
        tracing::warn!(
            calls,
            "upstream calls still running when only the settling part of shutdown_grace \
             is left: cancelling them, their outcome unknown (idempotency.on_ambiguous)"
        );
    }
    // Cancels the upstream calls, and ends the waits and joins of this replica.
    app.calls.cancel();
    if timeout_at(end, app.tasks.wait()).await.is_err() {
        tracing::error!(
            calls = app.tasks.len(),
            "upstream calls still settling at the end of shutdown_grace; their leases lapse"
        );
    }
}

/// Part 3: gives the answers [`FLUSH`], then closes the connections still open.
async fn close(draining: &Draining) {
    if timeout_at(Instant::now() + FLUSH, draining.ended())
        .await
        .is_err()
    {
        tracing::info!(
            connections = draining.count(),
            "closing the connections still open (their keyed calls are settled)"
        );
    }
    draining.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settling_part_is_a_quarter_of_the_grace_at_most_five_seconds() {
        assert_eq!(
            settling_part(Duration::from_secs(4)),
            Duration::from_secs(1)
        );
        assert_eq!(
            settling_part(Duration::from_secs(30)),
            Duration::from_secs(5)
        );
        assert_eq!(settling_part(Duration::ZERO), Duration::ZERO);
    }
}
