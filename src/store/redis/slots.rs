//! Redis Cluster hash slots of the gateway's keys, and the per-slot markers (warmth, and
//! the epoch markers of vouched claims).
//!
//! Every key of one record carries the record's hash tag (`<prefix>:{<record hex>}`),
//! so every script runs in one slot. The warmth marker is not per record: there is one
//! per hash slot, `<prefix>:warm:{<tag>}`, where `<tag>` is a short string chosen so
//! that the marker lands in that slot ([`SlotMarkers`]). The claim script reads the
//! marker of the record's own slot, so a cluster shard that lost its data is seen cold
//! on its own, by the very next claim of one of its keys, while other shards stay
//! warm. In standalone and Sentinel mode the same 16,384 keys live on one server.

use std::sync::OnceLock;

/// Hash slots of Redis Cluster.
pub const SLOTS: usize = 16_384;

/// The Redis Cluster hash slot of `key` (CRC16 of its hash tag, or of the whole key).
pub fn slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// A key with its hash slot, computed once for all who need it (CRC16 of a record key's
/// 64-character tag).
#[derive(Debug, Clone, Copy)]
pub struct Slotted<'a> {
    pub key: &'a str,
    pub slot: u16,
}

impl<'a> Slotted<'a> {
    pub fn new(key: &'a str) -> Self {
        Self {
            key,
            slot: slot(key),
        }
    }
}

/// For every slot, the shortest hex tag (by counting up) whose slot it is. Found once
/// per process, in a few milliseconds.
fn tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut missing = SLOTS;
        let mut n: u32 = 0;
        while missing > 0 {
            let tag = format!("{n:x}");
            let s = usize::from(fred::util::redis_keyslot(tag.as_bytes()));
            if tags[s].is_empty() {
                tags[s] = tag;
                missing -= 1;
            }
            n += 1;
        }
        tags
    })
}

/// The warmth marker key of every slot, for one key prefix.
#[derive(Debug)]
pub struct SlotMarkers {
    keys: Vec<String>,
}

impl SlotMarkers {
    /// The markers named `<prefix>:<kind>:{<tag>}`: `warm` (warmth) or `epoch` (what
    /// vouched claims read: `lua/claim.lua`).
    pub fn new(prefix: &str, kind: &str) -> Self {
        Self {
            keys: tags()
                .iter()
                .map(|tag| format!("{prefix}:{kind}:{{{tag}}}"))
                .collect(),
        }
    }

    /// The marker in the slot of `record_key`.
    pub fn for_key(&self, record_key: &str) -> &str {
        self.for_slot(slot(record_key))
    }

    /// The marker in `slot`.
    pub fn for_slot(&self, slot: u16) -> &str {
        &self.keys[usize::from(slot)]
    }

    /// Every marker, by slot.
    pub fn all(&self) -> &[String] {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_lands_in_its_own_slot() {
        let markers = SlotMarkers::new("idemgate", "warm");
        for (s, key) in markers.all().iter().enumerate() {
            assert_eq!(usize::from(slot(key)), s, "{key}");
        }
        // Known values: Redis' own CLUSTER KEYSLOT.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        let record = "idemgate:{0123abcd}";
        assert_eq!(slot(markers.for_key(record)), slot(record));
    }
}
