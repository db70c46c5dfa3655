//! The Rust side of `lua/peek.lua`: what a record holds, without claiming it.

use std::time::Instant;

use bytes::Bytes;
use fred::prelude::Value;

use super::{decode_record_reply, scripts, Record, RedisStore};
use crate::idempotency::Fingerprint;
use crate::metrics;
use crate::store::StoreError;

impl RedisStore {
    /// Runs `lua/peek.lua`: what a record holds, without claiming it.
    ///
    /// KEYS: `[record key]`. ARGV: `[fingerprint (32 bytes)]`.
    /// Reply: `{"C", encoded response, remaining ms}`, `{"I", remaining ms}`, `{"M"}`,
    /// or `{"N"}` absent; decoded by [`decode_record_reply`].
    pub async fn peek(&self, key: &str, fingerprint: &Fingerprint) -> Result<Record, StoreError> {
        let args = || -> Vec<Value> { vec![Bytes::copy_from_slice(fingerprint.as_bytes()).into()] };
        let started = Instant::now();
        let client = self.inner.lanes.for_key(key);
        let reply: Value = scripts::eval(&self.inner.peek, client, || (key, args())).await?;
        metrics::elapsed(&self.inner.ops.peek, started);
        decode_record_reply("peek", reply)
    }
}
