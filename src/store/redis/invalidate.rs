//! The Rust side of `lua/invalidate.lua` (admin API): deleting a record unless a
//! lease holds it, and telling every replica that it was invalidated.

use std::time::{Duration, Instant};

use fred::prelude::{PubsubInterface, Value};
use fred::types::scripts::Script;

use super::{scripts, RedisStore};
use crate::metrics;
use crate::store::StoreError;

/// What invalidating one tier's copy of a record did (admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidated {
    /// It was there and is gone: completed, lease expired, or leased and forced.
    Deleted,
    /// A live lease holds it and `force` was not given: nothing was deleted.
    Leased { remaining: Duration },
    /// No record.
    Absent,
}

/// Which live leases an invalidation deletes (a lapsed one goes in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leases<'a> {
    /// None: a leased record is refused.
    Keep,
    /// Every one (`force`).
    Delete,
    /// Only one held by this token: an execution Postgres shows completed, whose lease
    /// stands in Redis because it filled on replay.
    DeleteHeldBy(&'a str),
}

impl RedisStore {
    /// Runs `lua/invalidate.lua` (admin API): deletes the record unless a lease holds it
    /// and `force` is false, checked and deleted in one step.
    pub async fn invalidate(&self, key: &str, force: bool) -> Result<Invalidated, StoreError> {
        let leases = if force { Leases::Delete } else { Leases::Keep };
        self.invalidate_with(key, leases).await
    }

    /// [`Self::invalidate`], deleting the live leases `leases` names.
    ///
    /// KEYS: `[record key, its live stream]` (deleted with the record). ARGV: `["1"
    /// (every lease), "0" (none) or "t" (the one held by ARGV[2]), token]`.
    /// Reply: `{"D"}` deleted, `{"L", remaining ms}` leased (nothing deleted), `{"A"}`
    /// absent; decoded by [`decode_invalidate_reply`]. Re-sent after a dropped
    /// connection, a delete that had already run answers `Absent`.
    pub async fn invalidate_with(
        &self,
        key: &str,
        leases: Leases<'_>,
    ) -> Result<Invalidated, StoreError> {
        // Built per call rather than kept in `Inner`: the admin API is not on the request path.
        let script = Script::from_lua(super::record_script!("invalidate"));
        let started = Instant::now();
        let args = match leases {
            Leases::Keep => vec!["0", ""],
            Leases::Delete => vec!["1", ""],
            Leases::DeleteHeldBy(token) => vec!["t", token],
        };
        let call = || {
            (
                vec![key.to_string(), super::live::live_key(key)],
                args.clone(),
            )
        };
        let reply: Value = scripts::eval(&script, self.inner.lanes.for_key(key), call).await?;
        metrics::elapsed(&self.inner.ops.invalidate, started);
        decode_invalidate_reply(reply)
    }

    /// The channel of admin invalidations: one, not per record, on classic pub/sub,
    /// which a cluster delivers to subscribers on every node.
    pub fn invalidation_channel(&self) -> String {
        format!("{}:invalidated", self.inner.prefix)
    }

    /// Tells every replica that a record was invalidated (admin API), so that their
    /// replay caches drop it and its waiters re-check: the record key on
    /// [`Self::invalidation_channel`].
    pub async fn publish_invalidation(&self, key: &str) -> Result<(), StoreError> {
        let client = self.inner.lanes.pool().next();
        let _: i64 = client.publish(self.invalidation_channel(), key).await?;
        Ok(())
    }
}

/// The one decoder of the reply of `lua/invalidate.lua` (see [`RedisStore::invalidate`]).
pub(crate) fn decode_invalidate_reply(reply: Value) -> Result<Invalidated, StoreError> {
    let bad = |detail: &str| StoreError::Protocol {
        script: "invalidate",
        detail: detail.to_string(),
    };
    let Value::Array(items) = reply else {
        return Err(bad("not an array"));
    };
    let tag = items.first().and_then(|v| v.as_bytes_str());
    match (tag.as_deref(), items.len()) {
        (Some("D"), 1) => Ok(Invalidated::Deleted),
        (Some("A"), 1) => Ok(Invalidated::Absent),
        (Some("L"), 2) => {
            let ms = (items[1].as_i64()).ok_or_else(|| bad("remaining lease is not a number"))?;
            Ok(Invalidated::Leased {
                remaining: Duration::from_millis(ms.max(0) as u64),
            })
        }
        _ => Err(bad("unknown reply tag")),
    }
}
