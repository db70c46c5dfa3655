//! The first bytes of a connection, within a deadline ([`Preface`]): a client that
//! connects and stays silent, or stops partway through the HTTP/2 connection preface,
//! is dropped at `server.header_read_timeout` and gives back its `max_connections`
//! slot. hyper-util's protocol detection and hyper's HTTP/2 server wait for those bytes
//! with no timeout of their own (hyper's HTTP/1 header-read timeout starts after them).
//!
//! The deadline is a timer polled with the reads, not a loop that looks at the socket
//! again and again: a read that would wait past it fails with `TimedOut`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The HTTP/2 connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A stream whose first bytes must have come by a deadline: all of the HTTP/2
/// preface, or enough to tell that they are not it (HTTP/1.1, which hyper's header-read
/// timeout then bounds). Passes everything through after that.
pub(super) struct Preface<T> {
    inner: T,
    /// How much of the preface has come; the timer is `None` once it is decided.
    seen: usize,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> Preface<T> {
    /// `inner`, which must start with the preface (or something else) by `deadline`.
    pub(super) fn expected(inner: T, deadline: Instant) -> Self {
        Self {
            inner,
            seen: 0,
            timer: Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// `inner`, passed through (ALPN said HTTP/1.1).
    pub(super) fn not_expected(inner: T) -> Self {
        Self {
            inner,
            seen: 0,
            timer: None,
        }
    }

    /// Looks at bytes just read: decided once the preface is whole or they differ.
    fn saw(&mut self, read: &[u8]) {
        let wanted = &PREFACE[self.seen..];
        let n = read.len().min(wanted.len());
        if read.is_empty() || read[..n] != wanted[..n] {
            self.timer = None;
            return;
        }
        self.seen += n;
        if self.seen == PREFACE.len() {
            self.timer = None;
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
            match &polled {
                Poll::Ready(Ok(())) => this.saw(&buf.filled()[before..]),
                _ => this.timer = None,
            }
            return polled;
        }
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::debug!(
                    "no request or HTTP/2 preface within server.header_read_timeout; closing"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "server.header_read_timeout: no request or HTTP/2 preface",
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn first_read(sent: &'static [u8]) -> io::Result<usize> {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(sent).await.unwrap();
        let deadline = Instant::now() + Duration::from_millis(300);
        let mut io = Preface::expected(server, deadline);
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await?;
        // The first read took what was sent; the next waits for more.
        tokio::time::timeout(Duration::from_millis(600), io.read(&mut buf))
            .await
            .map_err(|_| io::Error::other("waited past the deadline"))?
            .map(|more| n + more)
    }

    #[tokio::test]
    async fn a_partial_preface_times_out_at_the_deadline() {
        let e = first_read(b"PRI * HTTP/2").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }

    #[tokio::test]
    async fn http1_bytes_are_passed_through_without_a_deadline() {
        let e = first_read(b"GET / HTTP/1.1\r\n").await.unwrap_err();
        assert_eq!(e.to_string(), "waited past the deadline");
    }

    #[tokio::test]
    async fn a_whole_preface_ends_the_deadline() {
        let e = first_read(PREFACE).await.unwrap_err();
        assert_eq!(e.to_string(), "waited past the deadline");
    }
}
