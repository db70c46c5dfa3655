//! The TLS handshake of a proxy connection (`[server.tls]`), within
//! `server.header_read_timeout`: a client that opens a connection and never finishes
//! its handshake (or never sends a ClientHello at all) is dropped then, as a client that
//! never sends its request head is, and gives back its `max_connections` slot. ALPN says
//! which protocol follows: `h2` is served as HTTP/2, `http/1.1` or none as HTTP/1.1.
//!
//! hyper's HTTP/2 server waits for the client's connection preface with no timeout of
//! its own, so after an `h2` handshake the preface must also arrive by the same
//! deadline ([`Preface`]); on HTTP/1.1, hyper's header-read timeout takes over.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::layers::write_timeout::WriteTimeout;

/// The length of the HTTP/2 connection preface (`PRI * HTTP/2.0…`).
const PREFACE_LEN: usize = 24;

/// A TLS connection after its handshake, and whether ALPN chose HTTP/2.
pub(super) struct Accepted {
    pub io: Preface<TlsStream<WriteTimeout>>,
    pub h2: bool,
}

/// The handshake on `io`, within `within`; `None` when it failed or took too long (the
/// connection is then dropped).
pub(super) async fn accept(
    acceptor: &TlsAcceptor,
    io: WriteTimeout,
    within: Duration,
) -> Option<Accepted> {
    let deadline = Instant::now() + within;
    let stream = match tokio::time::timeout_at(deadline, acceptor.accept(io)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(timeout = ?within, "TLS handshake not done within server.header_read_timeout; closing");
            return None;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let expected = if h2 { PREFACE_LEN } else { 0 };
    Some(Accepted {
        io: Preface::new(stream, expected, deadline),
        h2,
    })
}

/// A stream whose first `expected` bytes must have been read by a deadline: a read that
/// would wait past it fails with `TimedOut`. Passes everything through once they have
/// (at once with `expected` 0).
pub(super) struct Preface<T> {
    inner: T,
    /// Bytes still expected; the timer is `None` once they came.
    expected: usize,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> Preface<T> {
    fn new(inner: T, expected: usize, deadline: Instant) -> Self {
        let timer = (expected > 0).then(|| Box::pin(tokio::time::sleep_until(deadline)));
        Self {
            inner,
            expected,
            timer,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Preface<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(timer) = this.timer.as_mut() else {
            return polled;
        };
        if polled.is_ready() {
            let read = buf.filled().len() - before;
            this.expected = this.expected.saturating_sub(read);
            if this.expected == 0 || read == 0 {
                this.timer = None;
            }
            return polled;
        }
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::debug!("no HTTP/2 preface within server.header_read_timeout; closing");
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "server.header_read_timeout: no HTTP/2 preface",
                )))
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Preface<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
