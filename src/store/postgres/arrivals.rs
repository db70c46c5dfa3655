//! Jobs announced to a [`Batcher`](super::batcher::Batcher) before they queue: a caller a
//! step away from queueing (a completion whose Redis write is in flight, its Postgres
//! write next) says so, and a busy round waits for the announced jobs to join it instead
//! of leaving them a statement of their own. Under load that makes rounds larger and
//! statements fewer (each statement costs Postgres about as much as four more records
//! in it); a round of one never waits, so a lone request waits for nothing.
//!
//! The wait is for the jobs announced when the round closed, at most [`ARRIVAL_WAIT`];
//! an announcement ends when its job is queued or when the caller drops it (an error, a
//! lost lease, a client that went away), so nothing a caller leaves behind holds a round.
//! Only the arrival that completes the awaited count wakes the round's task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a busy round waits for announced jobs: a Redis round trip under load,
/// with room. A job that takes longer (Redis retrying) goes in a later round.
pub(super) const ARRIVAL_WAIT: Duration = Duration::from_millis(2);

/// The counts of announced and arrived jobs, and the round waiting for them.
#[derive(Default)]
pub(super) struct Arrivals {
    announced: AtomicU64,
    arrived: AtomicU64,
    /// The arrived count the waiting round needs; 0 while no round waits.
    awaited: AtomicU64,
    ready: Notify,
}

/// One announced job, until it is queued or given up (dropped).
#[must_use = "an announcement ends when it is dropped"]
pub struct Coming(Arc<Arrivals>);

impl Arrivals {
    /// Announces a job that will be queued soon (or never: dropping it says so).
    pub(super) fn announce(self: &Arc<Self>) -> Coming {
        self.announced.fetch_add(1, Ordering::AcqRel);
        Coming(self.clone())
    }

    /// Waits, at most `limit`, until as many jobs arrived as were announced now;
    /// returns whether any was still on its way (so the caller looks at its queue again).
    pub(super) async fn wait(&self, limit: Duration) -> bool {
        let target = self.announced.load(Ordering::Acquire);
        if self.arrived.load(Ordering::Acquire) >= target {
            return false;
        }
        let ready = self.ready.notified();
        let mut ready = std::pin::pin!(ready);
        // Registered before the count is read again: an arrival in between wakes it.
        ready.as_mut().enable();
        // Sequentially consistent with `arrive`: the store here and the load there (and
        // the other way round) are not both missed, so the wake-up is not lost.
        self.awaited.store(target, Ordering::SeqCst);
        if self.arrived.load(Ordering::SeqCst) < target {
            let _ = tokio::time::timeout(limit, ready).await;
        }
        self.awaited.store(0, Ordering::Release);
        true
    }

    fn arrive(&self) {
        let arrived = self.arrived.fetch_add(1, Ordering::SeqCst) + 1;
        let awaited = self.awaited.load(Ordering::SeqCst);
        if awaited != 0 && arrived == awaited {
            self.ready.notify_waiters();
        }
    }
}

impl Drop for Coming {
    fn drop(&mut self) {
        self.0.arrive();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn nothing_announced_means_no_wait() {
        let arrivals = Arc::new(Arrivals::default());
        drop(arrivals.announce());
        assert!(!arrivals.wait(ARRIVAL_WAIT).await);
    }

    /// The wait ends with the last announced arrival, long before the limit; a job
    /// announced after the wait began is not waited for.
    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_the_announced_jobs_arrive() {
        let arrivals = Arc::new(Arrivals::default());
        let (first, second) = (arrivals.announce(), arrivals.announce());
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let arrivals = arrivals.clone();
            async move { arrivals.wait(Duration::from_secs(60)).await }
        });
        tokio::task::yield_now().await;
        let later = arrivals.announce();
        tokio::time::sleep(Duration::from_millis(1)).await;
        drop(first);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !waiting.is_finished(),
            "one announced job is still on its way"
        );
        drop(second);
        assert!(waiting.await.unwrap());
        assert_eq!(started.elapsed(), Duration::from_millis(2));
        drop(later);
    }

    /// An announcement never dropped (a caller stuck in Redis) holds the wait only
    /// until the limit.
    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded() {
        let arrivals = Arc::new(Arrivals::default());
        let stuck = arrivals.announce();
        let started = tokio::time::Instant::now();
        assert!(arrivals.wait(ARRIVAL_WAIT).await);
        assert_eq!(started.elapsed(), ARRIVAL_WAIT);
        drop(stuck);
        assert!(
            !arrivals.wait(ARRIVAL_WAIT).await,
            "nothing is on its way now"
        );
    }
}
