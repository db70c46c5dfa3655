//! How much of an abandoned request body lingering close reads
//! (`server.linger_bytes`, `server.linger_time`).

use std::time::Duration;

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

    pub(super) fn off(&self) -> bool {
        self.bytes == 0 || self.time.is_zero()
    }
}
