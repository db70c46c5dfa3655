//! The Rust side of `lua/live.lua` and the reads of a live stream: the Redis Stream
//! (`<record key>:live`, in the record's slot) that carries a keyed answer while it
//! runs, to the duplicates that join it ([`crate::flow::live`]).
//!
//! Entries hold one field each: `h` the answer's head (status and headers, as a
//! stored response without a body), `d` a piece of the body, `e` the end (the
//! trailers, as a header block), `x` aborted (the joiners' answers are cut); the head
//! also names its execution (`o`, the SHA-1 of the lease's lock token). With
//! `[encryption]`, values are sealed ([`crate::idempotency::Sealing::seal_live`]).
//! Joiners do not block in Redis: they read after the last id they read
//! (`lua/live_read.lua`, which answers only while the record is held or completed by
//! the stream's execution), woken by the `L` the script publishes on the record's
//! channel ([`super::waiters`]). A stream ends with its execution: it is deleted with
//! the lease's release and the record's invalidation, and expires on its own.

use std::time::Duration;

use bytes::Bytes;
use fred::prelude::{PubsubInterface, Value};

use super::{channel, millis, scripts, RedisStore};
use crate::store::StoreError;

/// What [`RedisStore::live_append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Written (or nothing to write): the stream exists.
    Written,
    /// Nobody waited on the key and the stream does not exist: nothing written.
    Nobody,
    /// The lease is not ours any more.
    NotOurs,
}

/// One entry of a live stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Head(Bytes),
    Data(Bytes),
    End(Bytes),
    Aborted,
}

impl Entry {
    /// The entry's field name and value, as [`RedisStore::live_append`] writes it.
    pub fn field(&self) -> (&'static str, Bytes) {
        match self {
            Entry::Head(b) => ("h", b.clone()),
            Entry::Data(b) => ("d", b.clone()),
            Entry::End(b) => ("e", b.clone()),
            Entry::Aborted => ("x", Bytes::new()),
        }
    }

    pub(super) fn from_field(name: &str, value: Bytes) -> Option<Self> {
        Some(match name {
            "h" => Entry::Head(value),
            "d" => Entry::Data(value),
            "e" => Entry::End(value),
            "x" => Entry::Aborted,
            _ => return None,
        })
    }
}

/// The live stream of a record key.
pub fn live_key(record_key: &str) -> String {
    format!("{record_key}:live")
}

impl RedisStore {
    /// Runs `lua/live.lua`: appends `entries` to the record's live stream, if the
    /// lease (`token`) is still ours and somebody joins, and keeps the stream for
    /// `ttl` after.
    ///
    /// KEYS: `[record key, live stream key]`. ARGV: `[lock token, ttl ms, completion
    /// channel, "PUBLISH" or "SPUBLISH", field, value, field, value, ...]`.
    /// Reply: `1` written, `2` nobody joins (nothing written), `0` not ours.
    pub async fn live_append(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        entries: &[Entry],
    ) -> Result<Appended, StoreError> {
        let args = || -> Vec<Value> {
            let mut args: Vec<Value> = Vec::with_capacity(4 + 2 * entries.len());
            args.push(token.into());
            args.push(millis(ttl).into());
            args.push(channel(key).into());
            args.push(self.inner.publish.into());
            for entry in entries {
                let (name, value) = entry.field();
                args.push(name.into());
                args.push(value.into());
            }
            args
        };
        let call = || (vec![key.to_string(), live_key(key)], args());
        let client = self.inner.lanes.for_key(key);
        let reply: i64 = scripts::eval(&self.inner.live, client, call).await?;
        Ok(match reply {
            1 => Appended::Written,
            2 => Appended::Nobody,
            _ => Appended::NotOurs,
        })
    }

    /// Tells the holder of the record's lease that a duplicate waits to join (`J` on
    /// the record's channel), so that it starts the stream.
    pub async fn live_ask(&self, key: &str) -> Result<(), StoreError> {
        let client = self.inner.lanes.for_key(key);
        let _: i64 = match self.sharded_pubsub() {
            true => client.spublish(channel(key), "J").await?,
            false => client.publish(channel(key), "J").await?,
        };
        Ok(())
    }
}
