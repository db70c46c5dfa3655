//! Lingering close for request bodies the gateway answers before reading in full.
//!
//! hyper reads a request body only while someone polls it. When a handler answers early
//! (413 for a body over `server.max_request_body`, 408, a 4xx before the body matters)
//! and drops the body, hyper reads what is already buffered once, then closes the read
//! side and the connection (hyperium/hyper#2149, #3078, #3944). Closing a socket with
//! unread data makes the kernel send a reset, and a client that writes its whole body
//! before reading (Python's `http.client`, many embedded clients) gets `EPIPE` or
//! `ECONNRESET` instead of the answer.
//!
//! [`Lingering`] wraps each request body. Dropped before its end, it hands the rest of
//! the body to a background task that reads and discards it, as nginx's lingering close
//! does, at most `server.linger_bytes` bytes for at most `server.linger_time`; then the
//! body is dropped and hyper closes as before. A client that hangs up ends the drain at
//! once, and one that sends slowly holds it for `linger_time` at most.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::EXPECT;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::config::ServerConfig;

/// How much of an abandoned request body is read and discarded, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct LingerBounds {
    pub bytes: u64,
    pub time: Duration,
}

impl LingerBounds {
    pub fn from_config(server: &ServerConfig) -> Self {
        Self {
            bytes: server.linger_bytes.as_u64(),
            time: server.linger_time,
        }
    }

    fn off(&self) -> bool {
        self.bytes == 0 || self.time.is_zero()
    }
}

/// A request body that drains its rest in the background when dropped unfinished.
pub struct Lingering {
    inner: Option<Incoming>,
    bounds: LingerBounds,
    /// The client waits for `100 Continue` before sending the body.
    expects_continue: bool,
    polled: bool,
    done: bool,
}

impl Lingering {
    pub fn new(body: Incoming, headers: &HeaderMap, bounds: LingerBounds) -> Self {
        let expects_continue = (headers.get(EXPECT))
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        Self {
            inner: Some(body),
            bounds,
            expects_continue,
            polled: false,
            done: false,
        }
    }
}

impl Body for Lingering {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        this.polled = true;
        let frame = Pin::new(inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
            this.done = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => self.done || inner.is_end_stream(),
            None => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        (self.inner.as_ref()).map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if self.done || body.is_end_stream() || self.bounds.off() {
            return;
        }
        if self.expects_continue && !self.polled {
            // Nothing was asked for, so the client sends nothing; and polling now could
            // still send a `100 Continue` it should not get (hyperium/hyper#3137).
            return;
        }
        if let Some(left) = body.size_hint().exact() {
            if left > self.bounds.bytes {
                tracing::debug!(
                    left,
                    linger_bytes = self.bounds.bytes,
                    "not lingering: the rest of the request body exceeds server.linger_bytes"
                );
                return;
            }
        }
        // Dropped outside a runtime (never in the server): close as hyper does.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body, self.bounds));
        }
    }
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
enum Drained {
    /// The body ended: hyper can answer the next request or close cleanly.
    Complete,
    /// The client hung up or broke the framing.
    Failed,
    /// More than the byte bound followed: the connection closes with data unread.
    TooMuch,
    /// The time bound passed: the connection closes with data unread.
    TooSlow,
}

/// Reads and discards the rest of `body` within `bounds`; returns what became of it.
async fn drain(mut body: Incoming, bounds: LingerBounds) -> (Drained, u64) {
    let mut discarded = 0u64;
    let read = async {
        loop {
            match body.frame().await {
                None => return Drained::Complete,
                Some(Err(_)) => return Drained::Failed,
                Some(Ok(frame)) => {
                    let len = frame.data_ref().map_or(0, Bytes::len);
                    discarded = discarded.saturating_add(len as u64);
                    if discarded > bounds.bytes {
                        return Drained::TooMuch;
                    }
                }
            }
        }
    };
    let ended = tokio::time::timeout(bounds.time, read)
        .await
        .unwrap_or(Drained::TooSlow);
    match ended {
        Drained::Complete | Drained::Failed => tracing::debug!(
            discarded,
            outcome = ?ended,
            "lingering close: discarded the rest of a request body answered early"
        ),
        Drained::TooMuch | Drained::TooSlow => tracing::info!(
            discarded,
            outcome = ?ended,
            linger_bytes = bounds.bytes,
            linger_time = ?bounds.time,
            "lingering close gave up; closing with the request body unread"
        ),
    }
    (ended, discarded)
}
