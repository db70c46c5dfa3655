//! A connection's driver ([`drive`]): serves the connection until it ends; tells it to
//! go away (HTTP/2 `GOAWAY`; HTTP/1.1: close once the request in progress is answered)
//! when the process stops or its limits say so ([`ConnLimits::check`]: idle for
//! `server.idle_timeout`, an answer stalled for `server.write_timeout`, too many
//! streams reset); and closes it when, told to go by its limits, it has had nothing
//! open for `server.write_timeout` (its requests still running end within their own
//! bounds). Also the process's set of connections for the stop ([`Draining`]: told to go
//! away, waited for, closed).

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

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
///
/// The connection is polled at every wake; its watchers (the process's stop and close,
/// the limits' notification, the limits' next instant) only when one of them woke the
/// driver ([`Watchers`]): most wakes are the socket's or a request's, and polling the
/// four watchers at each of them cost a replay 1.4k instructions (2.5%, callgrind).
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
            let watchers = Arc::new(Watchers::default());
            let waker = Waker::from(watchers.clone());
            let mut conn = pin!(conn);
            let mut stop = pin!(stop.cancelled_owned());
            let mut close = pin!(close.cancelled_owned());
            let mut changed = pin!(limits.changed());
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
                let mut timer = pin!(sleep_until(wake));
                // New watchers (the timer), or one just fired: poll them all once.
                watchers.due.store(true, Ordering::Release);
                let event = poll_fn(|cx| {
                    if let Poll::Ready(done) = conn.as_mut().poll(cx) {
                        return Poll::Ready(Event::Ended(done));
                    }
                    watchers.task.register(cx.waker());
                    if !watchers.due.swap(false, Ordering::AcqRel) {
                        return Poll::Pending;
                    }
                    let mut cx = Context::from_waker(&waker);
                    if close.as_mut().poll(&mut cx).is_ready() {
                        Poll::Ready(Event::Close)
                    } else if !told && stop.as_mut().poll(&mut cx).is_ready() {
                        Poll::Ready(Event::Stop)
                    } else if changed.as_mut().poll(&mut cx).is_ready() {
                        Poll::Ready(Event::Changed)
                    } else if timer.as_mut().poll(&mut cx).is_ready() {
                        Poll::Ready(Event::Due)
                    } else {
                        Poll::Pending
                    }
                })
                .await;
                match event {
                    Event::Ended(done) => return done,
                    Event::Close => return Ok(()),
                    Event::Stop => {
                        told = true;
                        go_away(conn.as_mut());
                    }
                    // A fired notification resolves at once if polled again.
                    Event::Changed => changed.set(limits.changed()),
                    Event::Due => {}
                }
            }
        })
        .await
}

/// What woke the driver's loop.
enum Event {
    Ended(Result<(), BoxError>),
    Close,
    Stop,
    Changed,
    Due,
}

/// The waker the driver's watchers are polled with: it marks them due, then wakes the
/// driver's task.
#[derive(Default)]
struct Watchers {
    due: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Watchers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.due.store(true, Ordering::Release);
        self.task.wake();
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
