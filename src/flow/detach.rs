//! A client's upstream call, detached from the client: the call runs on a task of its
//! own ([`detached`]) so that neither a client that goes away nor one that has waited
//! the route's `upstream_timeout` cancels it. At that timeout the client is answered
//! 504 `upstream_timeout` (with `Retry-After`) while the call goes on under the key's
//! heartbeated lease, up to the route's `upstream_deadline`; its answer is then stored
//! and replayed to the retries that come after it, and meanwhile they find the key in
//! flight. A [`Watch`] decides, once, which came first: the upstream's answer or the
//! client's timeout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use super::identify::Identified;
use super::refused::{Refused, Reply};
use super::run::run_watched;
use super::settle::{Runner, Settled};
use crate::app::App;
use crate::metrics::{self, Detached, Outcome};
use crate::route::Route;
use crate::store::Lease;

/// Runs a client's request for its held lease on a detached task and waits for its
/// answer, or for the route's `upstream_timeout` while the upstream has not answered:
/// then the client gets 504 and the task goes on alone.
pub async fn detached(
    app: &Arc<App>,
    route: &Arc<Route>,
    lease: Lease,
    request: Identified,
    peer: SocketAddr,
) -> (Outcome, Reply) {
    let watch = Arc::new(Watch::default());
    // Boxed: the future is KiBs, and spawning, polling to completion and
    // joining a task move it (and its output slot, as large) several times over;
    // a box moves as a pointer.
    let (owned, route_owned, watched) = (app.clone(), route.clone(), watch.clone());
    let (parts, body) = (request.parts, request.body);
    let client = Box::pin(async move {
        let ran = run_watched(
            owned,
            route_owned,
            lease,
            parts,
            body,
            peer.ip(),
            Runner::Client,
            Some(&watched),
        )
        .await;
        (ran.0, ran.1)
    });
    let mut task = (app.tasks).spawn(client.in_current_span());
    let joined = tokio::select! {
        joined = &mut task => joined,
        () = tokio::time::sleep(route.upstream_timeout) => {
            if watch.detach() {
                return (
                    Outcome::UpstreamError,
                    Err(Refused::UpstreamStillRunning(route.upstream_timeout)),
                );
            }
            // The upstream answered in time: its answer is being stored.
            task.await
        }
    };
    joined.unwrap_or_else(|e| {
        // The detail (a panic message) is for the log, not for the client.
        tracing::error!(error = %e, "request task failed");
        (Outcome::UpstreamError, Err(Refused::TaskFailed))
    })
}

/// Which came first for one call: the upstream's answer or the client's timeout.
#[derive(Debug, Default)]
pub struct Watch(AtomicU8);

const RUNNING: u8 = 0;
const ANSWERED: u8 = 1;
const DETACHED: u8 = 2;

impl Watch {
    /// The client's side at its timeout: true when the call goes on without it (the
    /// upstream had not answered), counted in `idemgate_upstream_detached` until
    /// [`Watch::ended`].
    fn detach(&self) -> bool {
        // Counted before the switch: the task may end (and uncount it) at once after.
        metrics::detached(1.0);
        let switched = (self.0)
            .compare_exchange(RUNNING, DETACHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !switched {
            metrics::detached(-1.0);
        }
        switched
    }

    /// The call's side once the upstream answered (or the call failed): true when its
    /// client was already answered, and the task now ends alone.
    pub fn answered(&self) -> bool {
        (self.0)
            .compare_exchange(RUNNING, ANSWERED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    }

    /// A call that outlived its client ended: counted by how, with how long past the
    /// route's `upstream_timeout` it ran, and told in one log line (the request's span).
    pub fn ended(route: &Route, started: Instant, cancelled: bool, settled: Settled) {
        let how = match (cancelled, settled) {
            (true, _) => Detached::Cancelled,
            (_, Settled::Stored) => Detached::Stored,
            (_, Settled::Released) => Detached::Released,
            (_, Settled::Failed) => Detached::Failed,
            (_, Settled::LeaseLost) => Detached::LeaseLost,
            (_, Settled::NotStored) => Detached::NotStored,
        };
        let overrun = started.elapsed().saturating_sub(route.upstream_timeout);
        metrics::detached(-1.0);
        metrics::detached_ended(&route.name, how, overrun);
        tracing::info!(
            outcome = how.as_str(),
            overrun_ms = overrun.as_millis() as u64,
            "an upstream call that outlived its client's upstream_timeout ended"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_side_wins_once() {
        let watch = Watch::default();
        assert!(watch.detach(), "the client timed out first");
        assert!(watch.answered(), "the call learns it ends alone");
        let watch = Watch::default();
        assert!(!watch.answered(), "the upstream answered first");
        assert!(!watch.detach(), "the client then waits for the answer");
    }
}
