//! Whether Redis vouches for a claim (`postgres.claims = "vouched"`): what each shard's
//! primary was last seen running, read by the probe from the server itself and forgotten
//! whenever a connection is re-made or the cluster's map changes, and the verdict on one
//! acquired claim ([`Vouched`]).
//!
//! A claim is kept by Redis when its primary fsyncs every write before it answers
//! (`appendonly yes` with `appendfsync always`: the reply to the claim script comes after
//! the fsync), evicts nothing (`maxmemory-policy noeviction`) and, where that primary has
//! replicas, one of them acknowledged it (`WAIT 1`, once per round of claims:
//! [`super::acks`]; Sentinel and Cluster promote the replica with the most data, and in
//! those modes a replica is always waited for). Nothing is assumed: a shard not read
//! yet, or whose settings cannot be read (`CONFIG` renamed away), does not vouch, and its
//! claims take a Postgres row.

use std::time::Duration;

use fred::types::{ClusterHash, CustomCommand};

use super::cold_slots::{Bits, SlotSet};
use super::RedisStore;
use crate::store::StoreError;

/// What Redis' answer to a claim says about its durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouched {
    /// The mode does not ask (claims in Redis alone, or always written through).
    NotAsked,
    /// Redis keeps the claim: fsync'd before the reply, and acknowledged by a replica
    /// where the primary has one.
    Kept,
    /// Redis cannot vouch for it (why, as the metric's label): the claim takes a
    /// Postgres row for this request.
    Unvouched(&'static str),
}

/// What the probe last read from each shard's primary, by slot (the epoch markers, which
/// every mode with `[postgres]` reads, are [`super::epochs::Epochs`]).
#[derive(Debug)]
pub struct Vouch {
    /// Slots whose primary fsyncs every write before it answers.
    fsyncs: SlotSet,
    /// Slots whose primary has at least one connected replica: their claims are kept
    /// only once `WAIT 1` counts one acknowledgement.
    replicated: SlotSet,
    /// Slots whose primary replicates `PUBLISH` ([`Settings::publishes`]): their rounds
    /// probe with it instead of a write ([`super::replicas::Probe`]).
    publishes: SlotSet,
    /// Rounds of claims acknowledged by a replica ([`super::acks`]).
    pub(super) acks: super::acks::Acks,
    /// Bumped by every [`Vouch::forget`].
    generation: std::sync::atomic::AtomicU64,
    /// Sentinel or Cluster mode: every primary has replicas to wait for.
    replicas_expected: bool,
    /// How long a leased record outlives its lease (the longest `ttl`), so that a lease
    /// that ran out with no completion is taken over knowingly (`lua/claim.lua`).
    pub remember: Duration,
}

/// How a slot's claims are made durable, as far as the probe knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeping {
    /// Not known to fsync every write (or not read yet).
    No,
    /// The primary fsyncs; it has no replica to wait for.
    Fsync,
    /// The primary fsyncs, and a replica must acknowledge.
    FsyncAndReplica,
}

impl Vouch {
    /// `replicas_expected`: Sentinel and Cluster mode, where every primary is meant to
    /// have a replica that a failover may promote: claims always wait for one.
    pub fn new(remember: Duration, replicas_expected: bool) -> Self {
        Self {
            fsyncs: SlotSet::default(),
            publishes: SlotSet::default(),
            acks: Default::default(),
            generation: Default::default(),
            replicas_expected,
            replicated: {
                let set = SlotSet::default();
                if replicas_expected {
                    set.add(&super::cold_slots::all_slots());
                }
                set
            },
            remember,
        }
    }

    /// How claims of `slot` are kept now. Two atomic loads.
    pub fn of(&self, slot: u16) -> Keeping {
        match (self.fsyncs.contains(slot), self.replicated.contains(slot)) {
            (false, _) => Keeping::No,
            (true, false) => Keeping::Fsync,
            (true, true) => Keeping::FsyncAndReplica,
        }
    }

    /// What one shard's primary runs (`read`: its settings, or `None` when they could not
    /// be read); whether its slots' keeping changed. Nothing the reading grants stands
    /// when `generation` (read before the settings were) is no longer the current one,
    /// checked before and after it is recorded: the reading may be of a server forgotten
    /// meanwhile. Replicas, once
    /// seen, stay expected until the next [`Vouch::forget`]: a replica that is resyncing
    /// or cut off at one reading may still be promoted, and its shard's claims are then
    /// written through (no replica acknowledges) rather than kept unacknowledged.
    pub fn observe(&self, generation: u64, slots: &Bits, read: Option<Settings>) -> bool {
        if self.generation.load(std::sync::atomic::Ordering::Acquire) != generation {
            return false;
        }
        let read = read.unwrap_or_default();
        match read.publishes {
            true => self.publishes.add(slots),
            false => self.publishes.remove(slots),
        };
        let a = match read.fsyncs {
            true => self.fsyncs.add(slots),
            false => self.fsyncs.remove(slots),
        };
        let b = read.replicas > 0 && self.replicated.add(slots);
        // A `forget` since the generation was checked may have run before these adds: a
        // reading of the server it forgot must not stand. What it granted is taken back
        // (the safe side: such slots write their claims through until the next reading);
        // replicas stay expected.
        if self.generation.load(std::sync::atomic::Ordering::SeqCst) != generation {
            self.fsyncs.remove(slots);
            self.publishes.remove(slots);
            return false;
        }
        a || b
    }

    /// Whether a round of `slot` may probe with `PUBLISH`: its primary, as last read in
    /// this generation, replicates it. One atomic load.
    pub fn publishes(&self, slot: u16) -> bool {
        self.publishes.contains(slot)
    }

    /// The current generation of what is known (see [`Vouch::observe`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Every slot back to "not known": a connection was re-made, or the cluster's map
    /// changed, so the primary that answers may be another server. Readings started
    /// before are discarded. In Sentinel and Cluster mode replicas stay expected.
    pub fn forget(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let all = super::cold_slots::all_slots();
        self.fsyncs.remove(&all);
        self.publishes.remove(&all);
        if !self.replicas_expected {
            self.replicated.remove(&all);
        }
    }
}

/// One primary's settings, as read by the probe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// `appendonly yes`, `appendfsync always` and `maxmemory-policy noeviction`: every
    /// write fsync'd before the reply, and nothing evicted.
    pub fsyncs: bool,
    /// `connected_slaves` of `INFO replication`.
    pub replicas: u32,
    /// `cluster-enabled no`, and this connection may `PUBLISH` (an ACL may forbid it):
    /// the primary copies a `PUBLISH` into its replication stream, where a `WAIT`
    /// behind it counts the replicas that received everything before it.
    pub publishes: bool,
}

impl RedisStore {
    /// Reads the settings of the primary serving `slot` (`CONFIG GET appendonly
    /// appendfsync maxmemory-policy cluster-enabled`, `INFO replication`, and outside
    /// cluster mode a `PUBLISH` on the probe's channel), on that slot's connection.
    pub async fn primary_settings(&self, slot: u16) -> Result<Settings, StoreError> {
        let client = self.inner.lanes.for_slot(slot);
        let config = CustomCommand::new_static("CONFIG", ClusterHash::Custom(slot), false);
        let info = CustomCommand::new_static("INFO", ClusterHash::Custom(slot), false);
        let pairs: Vec<String> = fred::prelude::ClientLike::custom(
            client,
            config,
            vec![
                "GET",
                "appendonly",
                "appendfsync",
                "maxmemory-policy",
                "cluster-enabled",
            ],
        )
        .await?;
        let replication: String =
            fred::prelude::ClientLike::custom(client, info, vec!["replication"]).await?;
        let mut settings = parse_settings(&pairs, &replication);
        if settings.publishes {
            let published: Result<i64, _> =
                fred::prelude::PubsubInterface::publish(client, self.probe_key(slot), 0).await;
            settings.publishes = published.is_ok();
        }
        Ok(settings)
    }

    /// The probe's reading of every shard: which claims Redis vouches for from now on.
    /// A shard that cannot be read does not vouch (logged when that changes).
    pub async fn probe_vouching(&self) {
        let Some(vouch) = &self.inner.vouch else {
            return;
        };
        for shard in self.shards() {
            let generation = vouch.generation();
            let read = self.primary_settings(shard.probe_slot).await;
            if vouch.observe(generation, &shard.slots, read.as_ref().ok().copied()) {
                match read {
                    Ok(s) => tracing::info!(shard = %shard.name, fsyncs = s.fsyncs,
                        replicas = s.replicas, publishes = s.publishes, "redis settings read: claims of this shard \
                        are {}", if s.fsyncs { "kept by redis" } else { "written through \
                        to postgres (redis does not fsync every write or may evict: \
                        appendonly yes, appendfsync always, maxmemory-policy noeviction)" }),
                    Err(e) => tracing::warn!(shard = %shard.name, error = %e, "cannot read \
                        the redis settings: claims of this shard are written through to \
                        postgres"),
                }
            }
        }
    }

    /// Whether some shard's primary was last seen to fsync every write (vouched
    /// claims): its claims may be kept by Redis alone once the markers are written.
    pub fn may_keep_claims(&self) -> bool {
        (self.inner.vouch.as_ref()).is_some_and(|v| !v.fsyncs.is_empty())
    }

    /// The key prefix (`redis.key_prefix`).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Forgets every shard's settings (see [`Vouch::forget`]).
    pub fn forget_vouching(&self) {
        if let Some(vouch) = &self.inner.vouch {
            vouch.forget();
        }
    }

    /// [`Self::forget_vouching`] whenever a connection of the claim pool or of the
    /// `WAIT` connections is (re)made or sees the cluster's map change: another server
    /// may answer either now, and rounds in flight no longer count
    /// ([`super::acks`]). One task per client, until it closes.
    pub fn forget_vouching_on_changes(&self) {
        let redis = self.clone();
        self.on_topology_change(move |_| redis.forget_vouching());
        if let Some(wait) = &self.inner.replica_wait {
            let redis = self.clone();
            super::lanes::on_events(wait.pool(), move |_| redis.forget_vouching());
        }
    }
}

/// `CONFIG GET appendonly appendfsync maxmemory-policy cluster-enabled`'s pairs and
/// `INFO replication`'s text (`publishes` as far as the pairs say).
fn parse_settings(pairs: &[String], replication: &str) -> Settings {
    let get = |name: &str| {
        (pairs.chunks(2))
            .find(|p| p.first().map(String::as_str) == Some(name))
            .and_then(|p| p.get(1).map(String::as_str))
    };
    let replicas = (replication.lines())
        .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Settings {
        fsyncs: get("appendonly") == Some("yes")
            && get("appendfsync") == Some("always")
            && get("maxmemory-policy") == Some("noeviction"),
        replicas,
        publishes: get("cluster-enabled") == Some("no"),
    }
}

#[cfg(test)]
mod tests;
