//! Vouched claims acknowledged by a replica in rounds: one `WAIT` for every claim
//! answered before it, instead of one `WAIT` behind each claim.
//!
//! `WAIT` counts the replicas that acknowledged the last write of *its own* connection,
//! at an offset of the one replication stream of the primary. So a probe write sent on
//! the shard's `WAIT` connection after some claims were answered sits after all of them
//! in that stream, and a `WAIT` behind it that counts a replica covers every one of them.
//! A claim answered by its primary joins the shard's next round; the shard's driver (a
//! task per shard, started on first use) takes the round when it has members, once the
//! claims answered in the same turn joined it
//! ([`crate::store::let_woken_callers_queue`]), sends a probe (`PUBLISH` where the
//! primary replicates it, so no AOF write and no fsync: [`super::replicas::Probe`];
//! else `SET <probe key>`) and `WAIT 1 <redis.replica_ack_timeout>` pipelined on the
//! `WAIT` connection, and tells every member at once. While one round is on its way,
//! the next one fills: a group commit, with one wake-up per claim and a `WAIT` per
//! round.
//!
//! A member that goes away leaves nothing behind: a round is a shared cell, dropped
//! with its last holder.
//!
//! That covers the claims only if the claim and the round's probe went to the same
//! server. So the `WAIT` connections never re-send a command
//! ([`super::connect::Resends::Never`]: no `WAIT` answered by a connection that wrote
//! nothing); a round runs only while the claim connections and the `WAIT` connections
//! route the shard to the same server ([`super::lanes::route`]); and a claim counts its
//! round only if no connection of either pool was re-made and no slot map changed from
//! before the claim was sent until the round answered (the generation of
//! [`super::vouch::Vouch`], bumped by every such event). Otherwise the claim is
//! `rerouted` and takes a Postgres row.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify};

use super::replicas::Probe;
use super::RedisStore;

/// The rounds of every shard, by the slot its probe writes to (the shard's first slot
/// as fred routes it now). Keyed by that slot, not by the primary's name, so that a
/// slot moved to another primary is never probed for the shard it left; at most one
/// driver per slot, so the map stays bounded.
#[derive(Debug, Default)]
pub struct Acks {
    shards: Mutex<HashMap<u16, Arc<ShardAcks>>>,
}

/// One shard's next round and its driver's wake-up.
#[derive(Debug)]
struct ShardAcks {
    next: Mutex<Arc<Round>>,
    wake: Notify,
}

/// One round: its members, and what its `WAIT` said (`None` until it answered).
#[derive(Debug)]
struct Round {
    members: AtomicUsize,
    acked: watch::Sender<Option<Ack>>,
}

/// What a round says about the claims answered before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ack {
    /// A replica acknowledged them.
    Acked,
    /// No replica did within `redis.replica_ack_timeout`, or the round failed.
    Short,
    /// The round may have counted another server's writes: the two pools routed the
    /// shard to different servers, or a connection was re-made or a slot map changed
    /// since the claim was sent.
    Rerouted,
}

impl Round {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            members: AtomicUsize::new(0),
            acked: watch::Sender::new(None),
        })
    }
}

impl RedisStore {
    /// Whether a replica acknowledged the claim in `slot` this replica's primary just
    /// answered, sent when the generation of what is known was `since`: joins the
    /// shard's next round and waits for its `WAIT`.
    pub(super) async fn acknowledged_in_round(&self, slot: u16, since: u64) -> Ack {
        let Some(vouch) = &self.inner.vouch else {
            return Ack::Short;
        };
        let shard = self.shard_of(slot);
        let acks = {
            let mut shards = vouch.acks.shards.lock().unwrap_or_else(|e| e.into_inner());
            match shards.get(&shard.probe_slot) {
                Some(acks) => acks.clone(),
                None => {
                    let acks = Arc::new(ShardAcks {
                        next: Mutex::new(Round::new()),
                        wake: Notify::new(),
                    });
                    shards.insert(shard.probe_slot, acks.clone());
                    tokio::spawn(self.clone().drive(acks.clone(), shard.probe_slot));
                    acks
                }
            }
        };
        let mut answer = {
            let round = acks.next.lock().unwrap_or_else(|e| e.into_inner());
            round.members.fetch_add(1, Ordering::AcqRel);
            round.acked.subscribe()
        };
        acks.wake.notify_one();
        let acked = match answer.wait_for(Option::is_some).await {
            Ok(acked) => acked.unwrap_or(Ack::Short),
            Err(_) => Ack::Short,
        };
        match acked {
            Ack::Acked if vouch.generation() != since => Ack::Rerouted,
            acked => acked,
        }
    }

    /// A shard's driver: takes each round that has members, sends its probe write and
    /// `WAIT` on the `WAIT` connection of `slot`, and answers every member.
    async fn drive(self, acks: Arc<ShardAcks>, slot: u16) {
        let probe = self.probe_key(slot);
        // The channel named like the probe key where the primary replicates `PUBLISH`
        // (no AOF write, so no fsync for the round), else a write to the key. Read each
        // round: a reading of another server bumps the generation first, and every
        // claim sent before it is then rerouted.
        let probe_now = || match self.inner.vouch.as_ref() {
            Some(vouch) if vouch.publishes(slot) => Probe::Publish(&probe),
            _ => Probe::Set(&probe),
        };
        loop {
            acks.wake.notified().await;
            // Claims answered in this turn join first: one WAIT covers them all.
            crate::store::let_woken_callers_queue().await;
            let round = {
                let mut next = acks.next.lock().unwrap_or_else(|e| e.into_inner());
                std::mem::replace(&mut *next, Round::new())
            };
            if round.members.load(Ordering::Acquire) == 0 {
                continue;
            }
            let acked = match &self.inner.replica_wait {
                Some(wait) if !self.routed_alike(wait, slot) => Ack::Rerouted,
                Some(wait) => match wait.acked_after_probe(slot, probe_now(), 1).await {
                    true => Ack::Acked,
                    false => Ack::Short,
                },
                None => Ack::Short,
            };
            round.acked.send_replace(Some(acked));
        }
    }

    /// Whether the claim connections and the `WAIT` connections send commands of
    /// `slot` to one and the same server now.
    fn routed_alike(&self, wait: &super::replicas::ReplicaWait, slot: u16) -> bool {
        let claims = self.inner.lanes.route(slot);
        claims.is_some() && claims == wait.route(slot)
    }
}
