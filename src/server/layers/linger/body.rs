//! The request body wrapper: [`Lingering`] hands the rest of a body dropped before its
//! end to a background [`drain`].

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::EXPECT;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::LingerBounds;

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
