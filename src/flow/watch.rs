//! A client's call and its client's `upstream_timeout`: which came first, the
//! upstream's answer or the timeout ([`Watch`], decided once), how a call that
//! outlived its client is counted and told once it ends, however it ends ([`Alone`]),
//! and who learns of the answer when ([`Answering`]: the client's watch, a live
//! answer's first client, [`Settling`] its clean or broken end).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::response::Response;
use tokio::sync::oneshot;

use super::live::recording::Recording;
use super::settle::Settled;
use crate::metrics::{self, Detached};
use crate::route::Route;

/// Which came first for one call: the upstream's answer or the client's timeout.
#[derive(Debug, Default)]
pub struct Watch(AtomicU8);

const RUNNING: u8 = 0;
const ANSWERED: u8 = 1;
const DETACHED: u8 = 2;

impl Watch {
    /// The client's side at its timeout: true when the call goes on without it (the
    /// upstream had not answered), counted in `idemgate_upstream_detached` until its
    /// [`Alone`] is dropped.
    pub fn detach(&self) -> bool {
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
    fn answered(&self) -> bool {
        (self.0)
            .compare_exchange(RUNNING, ANSWERED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    }

    fn detached(&self) -> bool {
        self.0.load(Ordering::Acquire) == DETACHED
    }
}

/// The task's side of a client's call: when its client was answered first, the call
/// is uncounted from `idemgate_upstream_detached` when this is dropped, counted by how
/// it ended, and told in one log line (the request's span) — a task that panics or is
/// dropped before it settled included.
pub struct Alone {
    watch: Arc<Watch>,
    route: Arc<Route>,
    started: Instant,
    ended: Option<Detached>,
}

impl Alone {
    pub fn new(watch: Arc<Watch>, route: Arc<Route>) -> Self {
        Self {
            watch,
            route,
            started: Instant::now(),
            ended: None,
        }
    }

    /// Whether the client was answered first (the upstream answered, or failed, now).
    pub fn answered(&self) -> bool {
        self.watch.answered()
    }

    /// How the call ended: `cancelled` at its hard limit (or the shutdown), else as
    /// the lease settled.
    pub fn settled(&mut self, cancelled: bool, settled: Settled) {
        self.ended = Some(match (cancelled, settled) {
            (true, _) => Detached::Cancelled,
            (_, Settled::Stored) => Detached::Stored,
            (_, Settled::Released) => Detached::Released,
            (_, Settled::Failed) => Detached::Failed,
            (_, Settled::LeaseLost) => Detached::LeaseLost,
            (_, Settled::NotStored) => Detached::NotStored,
        });
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        if !self.watch.detached() {
            return;
        }
        metrics::detached(-1.0);
        let overrun = (self.started.elapsed()).saturating_sub(self.route.upstream_timeout);
        let Some(how) = self.ended else {
            tracing::error!(
                "an upstream call that outlived its client's upstream_timeout ended \
                 without settling its key (the task failed or was dropped)"
            );
            return;
        };
        metrics::detached_ended(&self.route.name, how, overrun);
        tracing::info!(
            outcome = how.as_str(),
            overrun_ms = overrun.as_millis() as u64,
            "an upstream call that outlived its client's upstream_timeout ended"
        );
    }
}

/// A client's side of its call: its timeout's [`Alone`], and where a live answer's
/// first response goes at its head.
pub struct Client<'a> {
    pub alone: &'a mut Alone,
    pub early: oneshot::Sender<Response>,
}

/// Who learns of the upstream's answer, and when: a client's watch is told once, at the
/// head of a live answer, else when the call ends.
pub(super) struct Answering<'a> {
    alone: Option<&'a mut Alone>,
    early: Option<oneshot::Sender<Response>>,
    /// Told at a live answer's head: whether the client had been answered first.
    detached: Option<bool>,
    /// A live answer's recording, told when the key is settled.
    recording: Option<Arc<Recording>>,
}

/// Tells a live answer's recording how the key was settled ([`Settling::done`]), or,
/// dropped before (the task dropped or panicked), that it was not kept.
pub(super) struct Settling(Option<Arc<Recording>>);

impl Settling {
    /// Whether the answer went live (it has a recording to tell).
    pub(super) fn is_live(&self) -> bool {
        self.0.is_some()
    }

    /// The first client sees a clean end only if its answer is the key's outcome: stored
    /// (and not past `max_response_body`, where the key stores a 502 instead), or
    /// released (a gRPC status that releases the key: nothing is stored, retries run).
    pub(super) fn done(mut self, settled: Settled) {
        if let Some(recording) = self.0.take() {
            let kept = match settled {
                Settled::Stored => !recording.over(),
                Settled::Released => true,
                Settled::Failed | Settled::LeaseLost | Settled::NotStored => false,
            };
            recording.settled(kept);
        }
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        if let Some(recording) = self.0.take() {
            recording.settled(false);
        }
    }
}

impl<'a> Answering<'a> {
    pub(super) fn new(client: Option<Client<'a>>) -> Self {
        let (alone, early) = client.map(|c| (c.alone, c.early)).unzip();
        Self {
            alone,
            early,
            detached: None,
            recording: None,
        }
    }

    /// At a live answer's head: its recording, and where its client's response goes if
    /// it still waits.
    pub(super) fn at_head(&mut self) -> (Arc<Recording>, Option<oneshot::Sender<Response>>) {
        let detached = self.alone.as_ref().is_some_and(|alone| alone.answered());
        self.detached = Some(detached);
        let early = self.early.take().filter(|_| !detached);
        let recording = Recording::new(early.is_some());
        self.recording = Some(recording.clone());
        (recording, early)
    }

    /// Once the call ended: what tells a live answer's first client how its key settled.
    pub(super) fn settling(&mut self) -> Settling {
        Settling(self.recording.take())
    }

    /// Once the call ended: its [`Alone`], if its client was answered first.
    pub(super) fn alone(&mut self) -> Option<&'a mut Alone> {
        let detached = match self.detached {
            Some(detached) => detached,
            None => self.alone.as_ref().is_some_and(|alone| alone.answered()),
        };
        self.alone.take().filter(|_| detached)
    }
}

impl Drop for Answering<'_> {
    /// A call that ends without settling (its task panicked, or was dropped) still ends
    /// its live answer's first client.
    fn drop(&mut self) {
        if let Some(recording) = self.recording.take() {
            recording.settled(false);
        }
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
        assert!(watch.detached());
        let watch = Watch::default();
        assert!(!watch.answered(), "the upstream answered first");
        assert!(!watch.detach(), "the client then waits for the answer");
        assert!(!watch.detached());
    }
}
