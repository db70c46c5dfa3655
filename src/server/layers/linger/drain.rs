//! The background drain of an abandoned request body, within its bounds.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::bounds::LingerBounds;

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Drained {
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
pub(super) async fn drain(mut body: Incoming, bounds: LingerBounds) -> (Drained, u64) {
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
