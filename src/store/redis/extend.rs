//! The Rust side of `lua/extend.lua`: the lease holder's heartbeat (which writes back a
//! vouched lease Redis lost).

use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::Value;

use super::{millis, scripts, RedisStore};
use crate::idempotency::Fingerprint;
use crate::metrics;
use crate::store::StoreError;

impl RedisStore {
    /// Runs `lua/extend.lua`: the lease holder's heartbeat.
    ///
    /// KEYS: `[record key]`, and with vouched claims the epoch marker of its slot.
    /// ARGV: `[lock token, lease ms]`, and with vouched claims `[fingerprint, fencing
    /// token, record layout, how long the record outlives its lease ms, epoch quarantine
    /// ms]`: a lease Redis lost with its slot's data is written back (one deleted on
    /// purpose, in a slot that lost nothing, is not).
    /// Reply: `1` extended, `2` written back, `0` the lease is not ours any more.
    pub async fn extend(
        &self,
        key: &str,
        token: &str,
        lease: Duration,
        fingerprint: &Fingerprint,
        fence: i64,
    ) -> Result<bool, StoreError> {
        let started = Instant::now();
        let args = || -> Vec<Value> {
            let mut args: Vec<Value> = vec![token.into(), millis(lease).into()];
            if self.inner.vouch.is_some() {
                args.push(Bytes::copy_from_slice(fingerprint.as_bytes()).into());
                args.push(fence.to_string().into());
                args.push(self.inner.record_format.into());
                let remember = self.inner.vouch.as_ref().map_or(0, |v| millis(v.remember));
                args.push(remember.into());
                let quarantine = self
                    .inner
                    .epochs
                    .as_ref()
                    .map_or(0, |e| millis(e.quarantine));
                args.push(quarantine.into());
            }
            args
        };
        let keys = || -> Vec<String> {
            match (&self.inner.vouch, &self.inner.epochs) {
                (Some(_), Some(epochs)) => {
                    let slot = fred::util::redis_keyslot(key.as_bytes());
                    vec![key.to_string(), epochs.markers.for_slot(slot).to_string()]
                }
                _ => vec![key.to_string()],
            }
        };
        let client = self.inner.lanes.for_key(key);
        let reply: i64 = scripts::eval(&self.inner.extend, client, || (keys(), args())).await?;
        metrics::elapsed(&self.inner.ops.extend, started);
        if reply == 2 {
            metrics::lease_written_back();
            tracing::warn!("redis had lost this lease (its slot lost its data): written back");
        }
        Ok(reply >= 1)
    }
}
