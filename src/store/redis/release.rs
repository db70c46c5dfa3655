//! The Rust side of `lua/release.lua`: gives a lease back unstored (its live stream
//! with it).

use std::time::Instant;

use super::live::live_key;
use super::{channel, scripts, RedisStore};
use crate::idempotency::Release;
use crate::metrics;
use crate::store::StoreError;

impl RedisStore {
    /// Runs `lua/release.lua`.
    ///
    /// KEYS: `[record key, its live stream]`. ARGV: `[lock token, completion channel,
    /// "PUBLISH" or "SPUBLISH"]`.
    /// Reply: `1` released (or already gone), `0` not held by this token. Only if a
    /// claim answered "in flight" for the record: publishes on the channel and deletes
    /// the live stream (fenced: only the holder's release deletes it).
    pub async fn release(&self, key: &str, token: &str) -> Result<Release, StoreError> {
        let started = Instant::now();
        let call = || {
            let keys = vec![key.to_string(), live_key(key)];
            let publish = self.inner.publish.to_string();
            (keys, vec![token.to_string(), channel(key), publish])
        };
        let client = self.inner.lanes.for_key(key);
        let reply: i64 = scripts::eval(&self.inner.release, client, call).await?;
        metrics::elapsed(&self.inner.ops.release, started);
        Ok(match reply {
            1 => Release::Released,
            _ => Release::NotHeld,
        })
    }
}
