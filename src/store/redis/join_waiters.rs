//! The Rust side of `lua/join_waiters.lua`: the fleet-wide set of duplicates waiting on a
//! record (joined with a cap, left with `ZREM`), and the channels they wait on.

use std::time::Duration;

use fred::prelude::{SortedSetsInterface, Value};

use super::{millis, scripts, waiters_key, RedisStore};
use crate::store::StoreError;

impl RedisStore {
    /// Runs `lua/join_waiters.lua`: joins the fleet-wide waiters of a record as `id`.
    ///
    /// KEYS: `[waiters set key]`. ARGV: `[max waiters, waiter id, member lifetime ms]`.
    /// Reply: `1` joined (leave with [`RedisStore::leave_waiters`]), `0` cap reached.
    pub async fn join_waiters(
        &self,
        key: &str,
        max: u32,
        id: &str,
        lifetime: Duration,
    ) -> Result<bool, StoreError> {
        let call = || -> (String, Vec<Value>) {
            let args = vec![i64::from(max).into(), id.into(), millis(lifetime).into()];
            (waiters_key(key), args)
        };
        let client = self.inner.lanes.for_key(key);
        let reply: i64 = scripts::eval(&self.inner.join_waiters, client, call).await?;
        Ok(reply == 1)
    }

    /// Leaves the waiters of a record (`ZREM` of the id; harmless when already gone).
    pub async fn leave_waiters(&self, key: &str, id: &str) -> Result<(), StoreError> {
        let _: i64 = (self.inner.lanes.for_key(key))
            .zrem(waiters_key(key), id)
            .await?;
        Ok(())
    }

    /// The pattern every completion channel matches, for the waiters' subscription.
    pub fn channel_pattern(&self) -> String {
        format!("{}:{{*}}:done", self.inner.prefix)
    }
}
