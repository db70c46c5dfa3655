//! What one live answer has produced so far, shared by its three readers: the tee that
//! writes it ([`super::tee`]), the first client's body ([`FirstBody`]) and the
//! publisher for joiners ([`super::publish`]).
//!
//! The record (the body for the store) is kept while it fits `server.max_response_body`;
//! the first client's queue holds clones of the same pieces (no copy), so while the
//! record is kept the queue costs nothing more and the tee never waits for a slow
//! client. Past the limit the record is dropped and the tee waits until the first
//! client has read down to [`WINDOW`] (or left): the client still gets every byte,
//! at its own pace, and memory stays bounded.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use hyper::body::{Body, Frame};
use tokio::sync::Notify;

/// Past the record's limit, the most the first client may have unread before the tee
/// waits for it.
pub const WINDOW: usize = 64 * 1024;

/// How a live answer ended.
#[derive(Debug, Clone)]
pub enum End {
    /// The whole body came, then these trailers (if any).
    Ended(Option<HeaderMap>),
    /// The exchange failed, or the call was cut (its deadline, the shutdown).
    Aborted,
}

/// The shared state of one live answer.
#[derive(Default)]
pub struct Recording {
    state: Mutex<State>,
    /// Wakes the tee: the first client read, or left.
    room: Notify,
    /// Wakes the publisher: a new piece, or the end.
    more: Notify,
}

#[derive(Default)]
struct State {
    /// The body so far, while it fits; emptied once it does not (`over`).
    record: Vec<Bytes>,
    recorded: u64,
    over: bool,
    /// What the first client has not read yet; `None` once it left.
    client: Option<VecDeque<Bytes>>,
    queued: usize,
    waker: Option<Waker>,
    end: Option<End>,
    /// Once the key is settled (stored, released), the first client may see the end:
    /// `Some(kept)`, where `kept` says this answer is the key's outcome, and only then
    /// is the end clean.
    settled: Option<bool>,
}

/// What the publisher has not yet written.
pub struct Since {
    pub pieces: Vec<Bytes>,
    pub end: Option<End>,
    /// The body went past the limit: joiners cannot be given the rest.
    pub over: bool,
}

impl Recording {
    /// A recording whose first client reads it ([`FirstBody`]), or none (`client`
    /// false: a call whose client was already answered).
    pub fn new(client: bool) -> Arc<Self> {
        let recording = Self::default();
        recording.lock().client = client.then(VecDeque::new);
        Arc::new(recording)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a piece of the body: to the record while it fits in `max` bytes, and to the
    /// first client's queue.
    pub fn push(&self, piece: Bytes, max: u64) {
        let mut state = self.lock();
        if !state.over {
            state.recorded += piece.len() as u64;
            if state.recorded > max {
                state.over = true;
                state.record = Vec::new();
            } else {
                state.record.push(piece.clone());
            }
        }
        let len = piece.len();
        if let Some(queue) = state.client.as_mut() {
            queue.push_back(piece);
            state.queued += len;
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
        }
        drop(state);
        self.more.notify_one();
    }

    /// Past the limit: waits until the first client has at most [`WINDOW`] unread, or
    /// has left. Returns at once while the record is kept.
    pub async fn room(&self) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let state = self.lock();
                if !state.over || state.client.is_none() || state.queued <= WINDOW {
                    return;
                }
            }
            room.await;
        }
    }

    /// Ends the answer (the first end counts).
    pub fn end(&self, end: End) {
        let mut state = self.lock();
        if state.end.is_some() {
            return;
        }
        state.end = Some(end);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        drop(state);
        self.more.notify_one();
    }

    /// The key is settled: the first client gets the end now, so that a retry it sends
    /// on seeing the end finds the key stored (or free), never still in flight. `kept`:
    /// this answer is the key's outcome (stored, or released); otherwise (the lease was
    /// lost to another execution, the answer could not be stored, the call ended
    /// unsettled) the first client's body ends broken, never in a clean end that
    /// disagrees with what retries get.
    pub fn settled(&self, kept: bool) {
        let mut state = self.lock();
        state.settled = Some(kept);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Whether the answer ended (however).
    pub fn ended(&self) -> bool {
        self.lock().end.is_some()
    }

    /// Whether the body went past the limit.
    pub fn over(&self) -> bool {
        self.lock().over
    }

    /// The recorded body in one piece (one copy, unless it came in one piece).
    pub fn body(&self) -> Bytes {
        let state = self.lock();
        match state.record.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            pieces => {
                let mut body = BytesMut::with_capacity(state.recorded as usize);
                for piece in pieces {
                    body.extend_from_slice(piece);
                }
                body.freeze()
            }
        }
    }

    /// The pieces after the first `from`, and the end if it came.
    pub fn since(&self, from: usize) -> Since {
        let state = self.lock();
        Since {
            pieces: state.record.get(from..).unwrap_or_default().to_vec(),
            end: state.end.clone(),
            over: state.over,
        }
    }

    /// Woken by a new piece or the end (enable it before [`since`](Self::since)).
    pub fn more(&self) -> &Notify {
        &self.more
    }
}

/// The first client's body: the recording's pieces as they come, then, once the key is
/// settled, its trailers and its end.
pub struct FirstBody {
    recording: Arc<Recording>,
    done: bool,
}

impl FirstBody {
    pub fn new(recording: Arc<Recording>) -> Self {
        Self {
            recording,
            done: false,
        }
    }
}

/// The upstream's answer was cut after its head: the client's body ends in an error
/// (HTTP/1.1: the connection closes before the last chunk; HTTP/2: the stream is reset).
#[derive(Debug, thiserror::Error)]
#[error("the upstream answer was cut")]
pub struct Cut;

impl Body for FirstBody {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let recording = self.recording.clone();
        let mut state = recording.lock();
        if let Some(piece) = state.client.as_mut().and_then(VecDeque::pop_front) {
            state.queued -= piece.len();
            drop(state);
            recording.room.notify_one();
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        let (Some(end), Some(kept)) = (state.end.clone(), state.settled) else {
            state.waker = Some(cx.waker().clone());
            return Poll::Pending;
        };
        let end = match kept {
            true => end,
            false => End::Aborted,
        };
        drop(state);
        self.done = true;
        Poll::Ready(match end {
            End::Ended(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
            End::Ended(None) => None,
            End::Aborted => Some(Err(Cut)),
        })
    }
}

impl Drop for FirstBody {
    fn drop(&mut self) {
        let mut state = self.recording.lock();
        state.client = None;
        state.queued = 0;
        drop(state);
        self.recording.room.notify_one();
    }
}
