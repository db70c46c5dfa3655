//! One connection's limits and state ([`ConnLimits`]): its share of
//! `server.max_concurrent_requests` and of `server.buffer_budget`
//! (`server.connection_share`), the requests open on it (`server.idle_timeout`), its
//! client's resets of accepted streams (`server.http2_max_reset_streams`) and its HTTP/2
//! answers being sent (the send watchdog, `server.write_timeout`); an admin connection
//! uses the idle and leaving rules only. The connection's driver ([`super::driver`]) asks
//! it ([`ConnLimits::check`]) when to send `GOAWAY` and when to close.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use metrics::Counter;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::budget::ByteBudget;
use crate::config::ServerConfig;
use crate::metrics::Limit;

/// The limits and state of one connection, shared by its requests and its driver.
pub struct ConnLimits {
    epoch: Instant,
    max_concurrent_requests: usize,
    in_flight: AtomicUsize,
    refused: Counter,
    budget: Arc<ByteBudget>,
    /// Requests from their arrival to the end of their answer.
    open: AtomicUsize,
    /// When `open` last fell to 0, in milliseconds since `epoch`.
    idle_since: AtomicU64,
    idle_timeout: Duration,
    write_timeout: Duration,
    resets: Mutex<Bucket>,
    /// Set once: the connection is to go away (`GOAWAY`, then closed).
    leaving: AtomicBool,
    /// When `leaving` was set, in milliseconds since `epoch`.
    left_at: AtomicU64,
    /// Set once the send watchdog freed a stalled answer: the connection then closes
    /// `write_timeout` after, whatever else it has open.
    stalled_at: AtomicU64,
    /// HTTP/2 answers whose bytes are still on their way.
    sending: Mutex<Vec<Arc<Sending>>>,
    /// Wakes the driver: an answer started, it must go, or, told to go, it became idle.
    changed: Notify,
}

/// What the driver is to do with its connection now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep serving; look again at the instant given (`None`: when woken).
    Serve(Option<Instant>),
    /// Send `GOAWAY` (HTTP/1.1: close once idle), if not done yet, and let the requests
    /// still open finish (each within its own bounds, the send watchdog's included);
    /// look again at the instant given (`None`: when woken).
    Leave(Option<Instant>),
    /// Told to go, the connection has had nothing open for `write_timeout`, or one of its
    /// answers stalled that long ago: close it.
    Close,
}

impl ConnLimits {
    /// A new connection's, its budget a share of `budget`: at least one request and
    /// its answer, so that a connection can always send the largest body allowed.
    pub fn new(server: &ServerConfig, budget: &Arc<ByteBudget>) -> Self {
        let share = server.connection_share;
        let one = (server.max_request_body.as_u64()) + server.max_response_body.as_u64();
        let budget = ByteBudget::share(
            budget.clone(),
            share.of(server.buffer_budget.as_u64()).max(one),
            Limit::ConnectionBudget.counter(),
        );
        Self {
            epoch: Instant::now(),
            max_concurrent_requests: share.of(server.max_concurrent_requests as u64) as usize,
            in_flight: AtomicUsize::new(0),
            refused: Limit::ConnectionInFlight.counter(),
            budget: Arc::new(budget),
            open: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            idle_timeout: server.idle_timeout,
            write_timeout: server.write_timeout,
            resets: Mutex::new(Bucket::full(server.http2_max_reset_streams)),
            leaving: AtomicBool::new(false),
            left_at: AtomicU64::new(0),
            stalled_at: AtomicU64::new(u64::MAX),
            sending: Mutex::new(Vec::new()),
            changed: Notify::new(),
        }
    }

    /// This connection's share of the buffer budget.
    pub fn budget(&self) -> &Arc<ByteBudget> {
        &self.budget
    }

    /// Counts one more request in flight, or refuses it (counted) at the share: the
    /// share's size then.
    pub(super) fn enter(&self) -> Result<(), u64> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.max_concurrent_requests {
            self.leave();
            self.refused.increment(1);
            return Err(self.max_concurrent_requests as u64);
        }
        Ok(())
    }

    pub(super) fn leave(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// A request opened on this connection, open until the guard is dropped.
    pub fn open(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        Open(self.clone())
    }

    /// The client reset (or left) a request before its answer: one token of
    /// `server.http2_max_reset_streams`; none left, the connection goes.
    pub fn abandoned(&self) {
        let now = Instant::now();
        let spent = self
            .resets
            .lock()
            .map(|mut b| !b.take(now))
            .unwrap_or(false);
        if spent {
            self.go(Limit::Http2ResetStreams);
        }
    }

    /// Watches an HTTP/2 answer until its bytes are all written ([`Sending`]).
    pub fn watch(&self, sending: Arc<Sending>) {
        let Ok(mut all) = self.sending.lock() else {
            return;
        };
        if all.len() >= 64 && all.len().is_power_of_two() {
            // Answers done since the last check: keep the list as long as what is open.
            all.retain(|s| Arc::strong_count(s) > 1);
        }
        all.push(sending);
        if all.len() == 1 {
            self.changed.notify_one();
        }
    }

    /// A new instant for the connection's watch (its timeline for [`Sending`]).
    pub fn sending(&self) -> Arc<Sending> {
        let sending = Sending {
            epoch: self.epoch,
            last: AtomicU64::new(0),
            handed: AtomicUsize::new(0),
            rest: Mutex::new(None),
        };
        sending.touch();
        Arc::new(sending)
    }

    /// Marks the connection to go away, once (counted as `why`).
    fn go(&self, why: Limit) {
        if !self.leaving.load(Ordering::Acquire) {
            // Before `leaving`: whoever sees it set finds when.
            self.left_at.store(self.millis(), Ordering::Release);
        }
        if !self.leaving.swap(true, Ordering::AcqRel) {
            why.counter().increment(1);
            tracing::debug!(limit = why.as_str(), "connection told to go away");
            self.changed.notify_one();
        }
    }

    /// Resolves when something the driver watches changed.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// What the driver is to do now: frees the answers stalled for `write_timeout`
    /// (the connection then goes, and is closed `write_timeout` later), tells it to go
    /// when idle for `idle_timeout`, and closes a connection told to go once it has had
    /// nothing open for `write_timeout` (a connection told to go for its resets or its
    /// idleness keeps its healthy requests: they end within their own bounds).
    pub fn check(&self) -> Verdict {
        let now = Instant::now();
        let at = |ms: u64| self.epoch + Duration::from_millis(ms);
        let mut next = None;
        if let Ok(mut all) = self.sending.lock() {
            all.retain(|s| Arc::strong_count(s) > 1);
            let mut stalled = false;
            all.retain(|s| {
                let by = now.checked_sub(self.write_timeout);
                let stuck = by.is_some_and(|by| s.stalled(at, by));
                if stuck {
                    s.free();
                }
                stalled |= stuck;
                !stuck
            });
            if stalled {
                let ms = self.millis();
                let _ = (self.stalled_at).compare_exchange(
                    u64::MAX,
                    ms,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                self.go(Limit::StreamWriteTimeout);
            }
            if !all.is_empty() {
                let tick = (self.write_timeout / 2).max(Duration::from_millis(50));
                next = Some(now + tick);
            }
        }
        let idle = self.open.load(Ordering::Acquire) == 0;
        let idle_since = at(self.idle_since.load(Ordering::Acquire));
        if !self.leaving.load(Ordering::Acquire) {
            if !idle {
                // The end of a request does not wake the driver (on a keep-alive
                // connection it would, at every request): it looks again within
                // `idle_timeout` and finds since when nothing is open.
                let look = now + self.idle_timeout;
                return Verdict::Serve(Some(next.map_or(look, |n| n.min(look))));
            }
            let deadline = idle_since + self.idle_timeout;
            if now < deadline {
                return Verdict::Serve(Some(next.map_or(deadline, |n| n.min(deadline))));
            }
            self.go(Limit::IdleTimeout);
        }
        // A stalled answer cannot end: the connection goes `write_timeout` after the
        // stall; else once it has had nothing open for `write_timeout`.
        let stalled_at = self.stalled_at.load(Ordering::Acquire);
        let close = match (stalled_at, idle) {
            (ms, _) if ms != u64::MAX => Some(at(ms) + self.write_timeout),
            (_, true) => {
                let left_at = at(self.left_at.load(Ordering::Acquire));
                Some(idle_since.max(left_at) + self.write_timeout)
            }
            (_, false) => None,
        };
        if let Some(close) = close {
            if now >= close {
                return Verdict::Close;
            }
            next = Some(next.map_or(close, |n| n.min(close)));
        }
        Verdict::Leave(next)
    }

    fn millis(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// A request open on its connection ([`ConnLimits::open`]): when the last one closes,
/// the connection's idle time starts.
pub struct Open(Arc<ConnLimits>);

impl Drop for Open {
    fn drop(&mut self) {
        let conn = &self.0;
        if conn.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            conn.idle_since.store(conn.millis(), Ordering::Release);
            // Only a connection told to go waits for it (to close once idle); a serving
            // one looks in its own time ([`ConnLimits::check`]).
            if conn.leaving.load(Ordering::Acquire) {
                conn.changed.notify_one();
            }
        }
    }
}

/// An HTTP/2 answer on its way: when its bytes last moved, and what of them is still
/// to be handed to hyper, freed by the watchdog if the client takes nothing for
/// `server.write_timeout`. Done when only the connection's watch holds it.
pub struct Sending {
    epoch: Instant,
    last: AtomicU64,
    /// Data frames handed to hyper and not yet written (or dropped) by it.
    handed: AtomicUsize,
    rest: Mutex<Option<Bytes>>,
}

impl Sending {
    /// The answer's bytes moved.
    pub fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Release);
    }

    /// A data frame was handed to hyper.
    pub fn handed(&self) {
        self.handed.fetch_add(1, Ordering::AcqRel);
        self.touch();
    }

    /// hyper is done with a data frame it was handed (written, or dropped).
    pub fn taken(&self) {
        self.handed.fetch_sub(1, Ordering::AcqRel);
        self.touch();
    }

    /// Bytes wait for the client (handed to hyper or still to be) and none moved since
    /// `by`.
    fn stalled(&self, at: impl Fn(u64) -> Instant, by: Instant) -> bool {
        let waiting = self.handed.load(Ordering::Acquire) > 0
            || self.rest.lock().map(|r| r.is_some()).unwrap_or(false);
        waiting && by >= at(self.last.load(Ordering::Acquire))
    }

    /// The bytes not yet handed to hyper.
    pub fn rest(&self) -> &Mutex<Option<Bytes>> {
        &self.rest
    }

    /// Drops the bytes not yet handed to hyper (and the charge they carry).
    fn free(&self) {
        let rest = self.rest.lock().map(|mut r| r.take());
        drop(rest);
    }
}

/// A token bucket of `size`, refilled over a minute.
struct Bucket {
    size: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl Bucket {
    fn full(size: u32) -> Self {
        Self {
            size: size as f64,
            tokens: size as f64,
            at: None,
        }
    }

    /// Takes a token if there is one.
    fn take(&mut self, now: Instant) -> bool {
        if let Some(at) = self.at {
            let refill = now.duration_since(at).as_secs_f64() * self.size / 60.0;
            self.tokens = (self.tokens + refill).min(self.size);
        }
        self.at = Some(now);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

#[cfg(test)]
mod tests;
