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
//! [`Lingering`](body::Lingering) wraps each request body. Dropped before its end, it hands the rest of
//! the body to a background task that reads and discards it, as nginx's lingering close
//! does, at most `server.linger_bytes` bytes for at most `server.linger_time`; then the
//! body is dropped and hyper closes as before. A client that hangs up ends the drain at
//! once, and one that sends slowly holds it for `linger_time` at most.
//!
//! [`LingerLayer`] puts every request body of a listener in a [`Lingering`](body::Lingering).

mod body;
mod layer;

use std::time::Duration;

use crate::config::ServerConfig;

pub use layer::{Linger, LingerLayer};

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
