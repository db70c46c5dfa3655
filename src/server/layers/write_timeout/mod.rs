//! A write timeout for server connections (`server.write_timeout`).
//!
//! hyper has none (hyperium/hyper#3852): a client that sends requests and never
//! reads the answers leaves hyper waiting on a full socket forever, holding every
//! response it has queued. [`WriteTimeout`] wraps the connection's socket: when a
//! write (or flush) cannot make progress for `write_timeout`, it fails with
//! `TimedOut`, hyper ends the connection and drops what it held. The timer runs only
//! while a write waits, and restarts with each write that gets through, as nginx's
//! `send_timeout` does: a slow reader that keeps reading is not cut, one that stops is.
//!
//! A timed-out socket is closed with a reset (`SO_LINGER` 0), so the kernel drops
//! the unsent data at once instead of keeping it for a peer that does not read.
//! Vectored writes are passed through, so hyper keeps using `writev`.
//!
//! A connection-level layer: [`WriteTimeoutLayer`] wraps each accepted socket.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::config::ServerConfig;
use crate::metrics::Limit;

/// `server.write_timeout` for every connection of a listener.
#[derive(Clone)]
pub struct WriteTimeoutLayer {
    timeout: Duration,
    timed_out: Counter,
}

impl WriteTimeoutLayer {
    pub fn from_config(server: &ServerConfig) -> Self {
        Self {
            timeout: server.write_timeout,
            timed_out: Limit::WriteTimeout.counter(),
        }
    }

    /// `stream`, its writes under the timeout.
    pub fn wrap(&self, stream: TcpStream) -> WriteTimeout {
        WriteTimeout::new(stream, self.timeout, self.timed_out.clone())
    }
}

/// A TCP stream whose writes fail after waiting `timeout` without progress.
pub struct WriteTimeout {
    inner: TcpStream,
    timeout: Duration,
    /// Created on the first write that has to wait, then reused.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
    timed_out: Counter,
}

impl WriteTimeout {
    pub fn new(inner: TcpStream, timeout: Duration, timed_out: Counter) -> Self {
        Self {
            inner,
            timeout,
            timer: None,
            armed: false,
            timed_out,
        }
    }

    /// Runs one write-side operation under the timer.
    fn guard<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(done) = op(Pin::new(&mut self.inner), cx) {
            self.armed = false;
            return Poll::Ready(done);
        }
        if !self.armed {
            let deadline = Instant::now() + self.timeout;
            match &mut self.timer {
                Some(timer) => timer.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        let Some(timer) = self.timer.as_mut() else {
            return Poll::Pending; // armed just above
        };
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.armed = false;
        self.timed_out.increment(1);
        // Reset instead of keeping unsent data for a peer that does not read.
        let _ = self.inner.set_zero_linger();
        tracing::debug!(timeout = ?self.timeout, "client did not read its response; closing");
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "server.write_timeout: the client did not read",
        )))
    }
}

impl AsyncRead for WriteTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteTimeout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.guard(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.guard(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.guard(cx, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.guard(cx, |io, cx| io.poll_shutdown(cx))
    }
}
