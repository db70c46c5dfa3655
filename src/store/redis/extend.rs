//! The Rust side of `lua/extend.lua`: the lease holder's heartbeat.

use std::time::{Duration, Instant};

use fred::prelude::Value;

use super::{millis, RedisStore};
use crate::metrics;
use crate::store::StoreError;

impl RedisStore {
    /// Runs `lua/extend.lua`: the lease holder's heartbeat.
    ///
    /// KEYS: `[record key]`. ARGV: `[lock token, lease ms]`.
    /// Reply: `1` extended, `0` the lease is not ours any more.
    pub async fn extend(
        &self,
        key: &str,
        token: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let started = Instant::now();
        let args: Vec<Value> = vec![token.into(), millis(lease).into()];
        let reply: i64 = (self.inner.extend)
            .evalsha_with_reload(self.inner.lanes.for_key(key), key, args)
            .await?;
        metrics::elapsed(&self.inner.ops.extend, started);
        Ok(reply == 1)
    }
}
