//! The response body the proxy listener hands hyper ([`ResponseBody`]): its data
//! carries its [`Charge`], if any, and on HTTP/2 it is watched by the connection's send
//! watchdog ([`Sending`]); and the 503 `overloaded` answer the proxy listener's limits
//! give (a gRPC status to a gRPC call).
//!
//! The watchdog: hyper polls an HTTP/2 answer's body only when the stream can take
//! more, so a client that never opens its stream's window (while answering PINGs, so
//! the socket moves) would hold the answer, and its stream, for as long as it stays
//! connected. Each data frame handed to hyper tells its [`Sending`] when hyper is done
//! with it; an answer with data handed over and none of it taken for
//! `server.write_timeout` is stalled. A buffered (charged) answer is handed out in
//! copies of at most [`PIECE`] bytes, so that what hyper holds of a stalled answer is one
//! or two pieces and the rest, kept in the [`Sending`], can be freed then (the next
//! poll fails, and hyper resets the stream); an answer that fits in one piece is handed
//! over as it is, no copy. Streamed answers (pass-through) are watched frame by frame: a
//! slow upstream is not a stalled client.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::Response;
use bytes::Bytes;
use http::HeaderValue;
use hyper::body::{Body, Frame, SizeHint};

use crate::budget::Charge;
use crate::grpc;
use crate::problem::Problem;
use crate::proxy::headers::X_REQUEST_ID;
use crate::server::conn_limits::{ConnLimits, Open, Sending};

/// The most of a watched answer handed to hyper at once: one HTTP/2 frame at the
/// default `SETTINGS_MAX_FRAME_SIZE`. A client must take this much per
/// `server.write_timeout` not to be cut.
pub const PIECE: usize = 16 * 1024;

/// A 503 `overloaded` answer, with the request's id when there is one; to a gRPC call
/// (`grpc`), the gRPC status `UNAVAILABLE` instead ([`grpc::render`]).
pub fn overloaded(
    problem: Problem,
    request_id: Option<HeaderValue>,
    grpc: bool,
) -> Response<ResponseBody> {
    let mut response = grpc::render(problem, grpc);
    if let Some(id) = request_id {
        response.headers_mut().insert(X_REQUEST_ID, id);
    }
    response.map(ResponseBody::plain)
}

/// A response body whose data carries its [`Charge`], so the budget is given back
/// when hyper has written it (or dropped it with the connection), not when hyper has
/// merely taken it into its write buffer.
pub struct ResponseBody {
    inner: axum::body::Body,
    charge: Option<Charge>,
    /// The request stays open on its connection until its answer is dropped.
    open: Option<Open>,
    /// An HTTP/2 answer under the connection's send watchdog.
    watched: Option<Watched>,
}

/// A charged HTTP/2 answer: where its unsent bytes wait, and the connection's share
/// of the budget that pays for the pieces hyper holds.
struct Watched {
    sending: Arc<Sending>,
    conn: Arc<ConnLimits>,
    /// The bytes moved to `sending`: pieces are cut from there.
    cutting: bool,
}

impl ResponseBody {
    pub fn plain(inner: axum::body::Body) -> Self {
        Self {
            inner,
            charge: None,
            open: None,
            watched: None,
        }
    }

    /// `inner`, whose data gives `charge` back once written.
    pub fn charged(inner: axum::body::Body, charge: Charge) -> Self {
        Self {
            charge: Some(charge),
            ..Self::plain(inner)
        }
    }

    /// This body handed out in pieces under `conn`'s send watchdog (HTTP/2).
    pub fn watched(mut self, conn: &Arc<ConnLimits>) -> Self {
        let sending = conn.sending();
        conn.watch(sending.clone());
        self.watched = Some(Watched {
            sending,
            conn: conn.clone(),
            cutting: false,
        });
        self
    }

    /// This body keeps its request `open` on its connection until dropped.
    pub fn keeping(mut self, open: Open) -> Self {
        self.open = Some(open);
        self
    }

    /// The next piece of a watched answer's bytes, `None` once they are all handed
    /// over; an error when the watchdog freed them.
    fn next_piece(&mut self) -> Option<Result<Bytes, axum::Error>> {
        let watched = self.watched.as_mut()?;
        if !watched.cutting {
            return None;
        }
        let Ok(mut rest) = watched.sending.rest().lock() else {
            return Some(Err(axum::Error::new("send watch poisoned")));
        };
        let Some(bytes) = rest.as_mut() else {
            return Some(Err(axum::Error::new(
                "server.write_timeout: the client took none of this answer",
            )));
        };
        let piece = bytes.split_to(bytes.len().min(PIECE));
        watched.sending.touch();
        if bytes.is_empty() {
            *rest = None;
            watched.cutting = false;
        }
        drop(rest);
        // A copy, so that the rest can be freed while hyper holds this piece.
        let len = piece.len() as u64;
        let charge = watched.conn.budget().take_anyway(len);
        let copy = charge.attach(Bytes::copy_from_slice(&piece));
        Some(Ok(watched_piece(copy, &watched.sending)))
    }

    /// The first data frame of a charged body: handed over whole if it fits one piece,
    /// else moved to the watch and cut.
    fn first(&mut self, data: Bytes) -> Result<Bytes, axum::Error> {
        let data = match self.charge.take() {
            Some(charge) => charge.attach(data),
            None => data,
        };
        let Some(watched) = self.watched.as_mut() else {
            return Ok(data);
        };
        if data.len() <= PIECE {
            return Ok(watched_piece(data, &watched.sending));
        }
        if let Ok(mut rest) = watched.sending.rest().lock() {
            *rest = Some(data);
        }
        watched.cutting = true;
        self.next_piece()
            .unwrap_or_else(|| Err(axum::Error::new("no piece")))
    }
}

/// `bytes` that tell `sending` that they moved when hyper is done with them.
fn watched_piece(bytes: Bytes, sending: &Arc<Sending>) -> Bytes {
    sending.handed();
    Bytes::from_owner(Piece {
        bytes,
        sending: sending.clone(),
    })
}

/// A piece of a watched answer.
struct Piece {
    bytes: Bytes,
    sending: Arc<Sending>,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        self.sending.taken();
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Some(piece) = this.next_piece() {
            return Poll::Ready(Some(piece.map(Frame::data)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() && this.charge.is_some() => {
                // A buffered body is one frame: the whole charge goes with it.
                let data = frame.into_data().unwrap_or_default();
                Poll::Ready(Some(this.first(data).map(Frame::data)))
            }
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => match &this.watched {
                Some(watched) => {
                    let data = frame.into_data().unwrap_or_default();
                    let piece = watched_piece(data, &watched.sending);
                    Poll::Ready(Some(Ok(Frame::data(piece))))
                }
                None => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        let cutting = self.watched.as_ref().is_some_and(|w| w.cutting);
        !cutting && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::response::Response;
    use http::header::CONTENT_TYPE;
    use http::{HeaderValue, StatusCode};

    use super::super::layer::settle;
    use crate::budget::ByteBudget;
    use crate::proxy::headers::REPLAYED;

    /// A replay of 100 bytes of `content_type`.
    fn replay(content_type: &'static str) -> Response {
        let mut response = Response::new(axum::body::Body::from(vec![0u8; 100]));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
        response
    }

    #[test]
    fn a_replay_that_does_not_fit_is_refused_as_what_it_replays() {
        let budget = Arc::new(ByteBudget::new(10));
        let grpc = settle(&budget, replay("application/grpc"));
        assert_eq!(grpc.status(), StatusCode::OK);
        assert_eq!(grpc.headers()["grpc-status"], "14", "UNAVAILABLE");
        let message = grpc.headers()["grpc-message"].to_str().unwrap();
        assert!(message.starts_with("overloaded: "), "{message}");
        let http = settle(&budget, replay("application/json"));
        assert_eq!(http.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http.headers()[CONTENT_TYPE], "application/problem+json");
    }
}
