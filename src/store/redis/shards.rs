//! The shards as fred routes them ([`Shard`]) and what the gateway keeps per slot on
//! them: the warmth markers' resets and the breaker's probe writes.

use fred::prelude::{ClientLike, KeysInterface, Value};

use super::cold_slots::{all_slots, bits_of_range, Bits};
use super::RedisStore;
use crate::store::StoreError;

/// A shard as fred routes it: a primary and the slots it serves (see
/// [`RedisStore::shards`]); in standalone and Sentinel mode, every slot.
#[derive(Debug, Clone)]
pub struct Shard {
    /// `host:port` of its primary, or `redis` for the one shard of every slot.
    pub name: String,
    pub slots: Bits,
    /// One of its slots: where the breaker's probe writes.
    pub probe_slot: u16,
}

impl RedisStore {
    /// The shards as fred routes them now: in a cluster, each primary with its slots
    /// (from the first client that knows the slot map: one reconnecting may not);
    /// otherwise (or before the cluster's slot map is known) one shard of every slot.
    pub fn shards(&self) -> Vec<Shard> {
        let mut shards: Vec<Shard> = Vec::new();
        for (name, ranges) in super::lanes::primaries(self.inner.lanes.pool()) {
            let mut slots = bits_of_range(ranges[0].0, ranges[0].1);
            for &(start, end) in &ranges[1..] {
                for (w, b) in slots.iter_mut().zip(&bits_of_range(start, end)) {
                    *w |= b;
                }
            }
            shards.push(Shard {
                name,
                slots,
                probe_slot: ranges[0].0,
            });
        }
        if shards.is_empty() {
            shards.push(Shard {
                name: "redis".into(),
                slots: all_slots(),
                probe_slot: 0,
            });
        }
        shards
    }

    /// The shard that serves `slot` now (see [`Self::shards`]); every slot when fred's
    /// slot map does not say.
    pub fn shard_of(&self, slot: u16) -> Shard {
        let word = usize::from(slot) / 64;
        let bit = 1u64 << (usize::from(slot) % 64);
        (self.shards().into_iter())
            .find(|s| s.slots[word] & bit != 0)
            .unwrap_or_else(|| Shard {
                name: "redis".into(),
                slots: all_slots(),
                probe_slot: 0,
            })
    }

    /// Calls `changed` whenever a connection of the pool is (re)made or fred's view of
    /// the cluster changes (a failover, a slot moved: fred re-reads the slot map after a
    /// `MOVED`), with what happened: the Redis this replica talks to may now hold other
    /// records than before. One task per client of the pool, until it closes.
    pub fn on_topology_change(&self, changed: impl Fn(&'static str) + Send + Sync + 'static) {
        super::lanes::on_events(self.inner.lanes.pool(), changed);
    }

    /// Proves that the shard serving `slot` takes writes again (the breaker's probe):
    /// one `DEL` of a throw-away key in that slot, on a connected client. Touches no
    /// marker.
    pub async fn probe_write(&self, slot: u16) -> Result<(), StoreError> {
        let _: i64 = self
            .inner
            .lanes
            .for_slot(slot)
            .del(self.probe_key(slot))
            .await?;
        Ok(())
    }

    /// The probes' throw-away key of `slot`.
    pub(super) fn probe_key(&self, slot: u16) -> String {
        format!("{}:probe", self.inner.markers.all()[usize::from(slot)])
    }

    /// Deletes the warmth markers of `slots` (see `warmth`): those slots count as cold
    /// on every replica until their markers are older than the longest ttl. Single-key
    /// `DEL`s, pipelined (each routed to its slot's primary in a cluster); rare (after
    /// a claim in Postgres or a refused completion), and only the slots concerned.
    pub async fn reset_markers(&self, slots: &[u16]) -> Result<(), StoreError> {
        let all = self.inner.markers.all();
        for chunk in slots.chunks(1024) {
            // One pipeline per lane (cluster mode): each client sends only to its shards.
            let mut pipelines: Vec<(&fred::prelude::Client, fred::clients::Pipeline<_>)> =
                Vec::new();
            for &slot in chunk {
                let client = self.inner.lanes.for_slot(slot);
                let at = match pipelines.iter().position(|(c, _)| c.id() == client.id()) {
                    Some(at) => at,
                    None => {
                        pipelines.push((client, client.pipeline()));
                        pipelines.len() - 1
                    }
                };
                let _: () = pipelines[at].1.del(all[usize::from(slot)].as_str()).await?;
            }
            for (_, pipeline) in pipelines {
                let _: Vec<Value> = pipeline.all().await?;
            }
        }
        Ok(())
    }

    /// Deletes the warmth marker of `record_key`'s slot only (one `DEL`): the slot of a
    /// record Redis lacks counts as cold at once, before [`Self::reset_markers`]
    /// lands.
    pub async fn reset_slot_marker(&self, record_key: &str) -> Result<(), StoreError> {
        let marker = self.inner.markers.for_key(record_key);
        let _: i64 = self.inner.lanes.for_key(record_key).del(marker).await?;
        Ok(())
    }
}
