//! `redis.replica_acks`: a completion that the record's primary's replicas acknowledge
//! before the client is answered. The completion script and `WAIT n timeout` are
//! pipelined on one connection (WAIT counts the replicas that acknowledged the writes
//! of *its* connection), routed to the record's slot in a cluster, so the extra cost is
//! the replicas' acknowledgement, not a second round trip.
//!
//! These connections are a pool of their own: `WAIT` blocks the connection it runs on,
//! and with a replica down every `WAIT` lasts `redis.replica_ack_timeout`; claims and
//! replays must not queue behind it. It has `redis.pool_size` connections, at least
//! [`MIN_WAIT_CONNECTIONS`]: completions waiting for replicas must not queue behind each
//! other on one connection either (with `pool_size = 1`).
//!
//! Limits (docs/guarantees.md, "Failover: what each mode guarantees"): `WAIT` is not synchronous
//! replication. A write acknowledged by `n` replicas survives the loss of the primary
//! when one of them is promoted (Redis Cluster and Sentinel prefer the most up-to-date
//! replica); a short `WAIT` is counted (`idemgate_redis_wait_short_total`), logged, and
//! the client is answered anyway. `WAIT` vouches only for the writes before it on its
//! own connection, so these connections never re-send a command
//! ([`super::connect::Resends::Never`]): a connection that drops between the script and
//! the `WAIT`, or a `MOVED` that would send the script to another node than its `WAIT`,
//! fails the pipeline, which counts as short (below), instead of a `WAIT` answered at
//! once by a connection that wrote nothing.
//!
//! A shard whose replicas stopped acknowledging is not waited for. `WAIT` blocks its
//! connection, and the commands pipelined behind it wait in Redis, which cannot cancel
//! them: with no replica acknowledging, each connection completes one record per
//! `replica_ack_timeout`, a queue builds that outlives every caller's command timeout,
//! and it drains only long after the replicas are back (8-10 s of completions failing on
//! a replica after a Sentinel partition healed, until the sentinels demoted the old
//! primary and it resynced). So a short `WAIT` marks its shard's slots
//! ([`ReplicaWait::unacked`]): their completions run the script alone on the main
//! connections, counted like a short `WAIT` (the client is answered either way; the
//! replicas would not have acknowledged), until the probe sees a write of that shard
//! acknowledged within `replica_ack_timeout` again ([`ReplicaWait::acknowledged`]). A
//! failed completion-and-`WAIT` marks them too: behind such a queue (or on connections
//! that fred re-made and flushed its queued pipelines into) the short replies arrive
//! after every caller has given up, so a short `WAIT` is never seen.

use bytes::Bytes;
use fred::error::Error as FredError;
use fred::prelude::{ClientLike, KeysInterface as _, Pool, PubsubInterface as _, Value};
use fred::types::scripts::Script;
use fred::types::Expiration;
use fred::types::{ClusterHash, CustomCommand};

use super::cold_slots::{Bits, SlotSet};
use super::lanes::Lanes;
use crate::config::RedisConfig;

/// The fewest `WAIT` connections (the main pool's default size).
pub const MIN_WAIT_CONNECTIONS: usize = 4;

/// What a probe writes for `WAIT` to count: its connection's last write must sit after
/// the writes it vouches for in the primary's replication stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe<'a> {
    /// `SET key 1 PX 60000`: replicated by every primary, and appended to its AOF (on
    /// `appendfsync always`, an fsync of its own on the primary and on each replica
    /// that fsyncs too).
    Set(&'a str),
    /// `PUBLISH channel 1`: a primary not in cluster mode replicates it but writes it to
    /// no AOF, so nobody fsyncs for it. In cluster mode it travels on the cluster bus
    /// and moves no replication offset: a `WAIT` behind it would count nothing, so it is
    /// used only where the primary says `cluster-enabled no` ([`super::vouch`]).
    Publish(&'a str),
}

/// How many replicas acknowledged a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicated {
    /// At least `redis.replica_acks`.
    Acknowledged,
    /// Fewer, within `redis.replica_ack_timeout`: the write is on the primary, maybe not
    /// on the replica a failover would promote.
    Short { acked: i64, wanted: i64 },
}

/// The dedicated connections and the `WAIT` arguments.
pub struct ReplicaWait {
    /// Split between the cluster's shards like the main pool ([`Lanes`]).
    lanes: Lanes,
    replicas: i64,
    timeout_ms: i64,
    /// Slots of shards whose replicas did not acknowledge their last `WAIT` in time:
    /// their completions skip `WAIT` until [`Self::acknowledged`] says otherwise.
    unacked: SlotSet,
}

impl ReplicaWait {
    /// `None` when `redis.replica_acks` is 0 and claims are not vouched (no `WAIT`, no
    /// extra connections).
    pub async fn connect(config: &RedisConfig, claims: bool) -> Result<Option<Self>, FredError> {
        if config.replica_acks == 0 && !claims {
            return Ok(None);
        }
        let size = config.pool_size.max(MIN_WAIT_CONNECTIONS);
        let pool = super::connect::build_pool(config, size, super::connect::Resends::Never)?;
        let lanes = Lanes::new(pool, config.mode == crate::config::RedisMode::Cluster);
        lanes.pool().connect();
        // Not awaited: the main pool's start-up already says whether Redis answers.
        Ok(Some(Self {
            lanes,
            replicas: i64::from(config.replica_acks),
            timeout_ms: i64::try_from(config.replica_ack_timeout.as_millis()).unwrap_or(i64::MAX),
            unacked: SlotSet::default(),
        }))
    }

    /// Whether completions wait (`redis.replica_acks` > 0; the connections may be
    /// here for vouched claims alone).
    pub fn for_completions(&self) -> bool {
        self.replicas > 0
    }

    /// Runs `script` (the completion script: its reply is returned as is) on `key` with
    /// `args`, then `WAIT replicas timeout`, pipelined on one connection. A `NOSCRIPT`
    /// (a restarted or promoted primary) loads the script and sends both again.
    pub async fn run(
        &self,
        script: &Script,
        key: &str,
        args: Vec<Value>,
    ) -> Result<(Value, Replicated), FredError> {
        // A connected client: one still reconnecting (to a primary the sentinels or the
        // cluster replaced) would fail the whole pipeline.
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let client = self.lanes.for_slot(slot);
        let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false);
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), true);
        let mut eval_args: Vec<Value> = Vec::with_capacity(args.len() + 3);
        eval_args.push(script.sha1().clone().into());
        eval_args.push(1.into());
        eval_args.push(Bytes::copy_from_slice(key.as_bytes()).into());
        eval_args.extend(args);
        for attempt in 0..2 {
            let pipeline = client.pipeline();
            let _: () = pipeline.custom(evalsha.clone(), eval_args.clone()).await?;
            let _: () = pipeline
                .custom(wait.clone(), vec![self.replicas, self.timeout_ms])
                .await?;
            let mut results = pipeline.try_all::<Value>().await.into_iter();
            match (results.next(), results.next()) {
                (Some(Err(e)), _) if attempt == 0 && e.details().starts_with("NOSCRIPT") => {
                    script.load(client).await?;
                }
                // The pipeline as a whole failed (fred answers a timeout with one error).
                (Some(Err(e)), None) => return Err(e),
                (Some(reply), Some(acked)) => {
                    let reply = reply?;
                    let acked = acked?.as_i64().unwrap_or(0);
                    let replicated = if acked >= self.replicas {
                        Replicated::Acknowledged
                    } else {
                        Replicated::Short {
                            acked,
                            wanted: self.replicas,
                        }
                    };
                    return Ok((reply, replicated));
                }
                _ => break,
            }
        }
        Err(FredError::new(
            fred::error::ErrorKind::Unknown,
            "completion and WAIT: no reply",
        ))
    }

    /// Whether completions of `slot` wait for the replicas (no short `WAIT` there since
    /// the probe last saw them acknowledge). One atomic load.
    pub fn waits(&self, slot: u16) -> bool {
        !self.unacked.contains(slot)
    }

    /// [`Self::run`], then a short `WAIT` counted and logged (the answer goes out
    /// anyway): the completion script's reply. A short `WAIT`, and a pipeline that
    /// failed (a timeout: most often stuck behind earlier `WAIT`s, whose replies come
    /// after their callers left), mark the slots of the key's shard (`shard`, asked only
    /// then): its completions skip `WAIT` from now on, a failed one's retry included.
    pub async fn complete(
        &self,
        script: &Script,
        key: &str,
        args: Vec<Value>,
        shard: impl FnOnce() -> (String, Bits),
    ) -> Result<Value, FredError> {
        let (reply, replicated) = match self.run(script, key, args).await {
            Ok(done) => done,
            Err(e) => {
                self.stop_waiting(shard, "the completion and its WAIT failed");
                return Err(e);
            }
        };
        if let Replicated::Short { acked, wanted } = replicated {
            crate::metrics::redis_wait_short();
            tracing::warn!(
                acked,
                wanted,
                "fewer replicas than redis.replica_acks acknowledged a completion within \
                 redis.replica_ack_timeout; answering anyway (stored on the primary only)"
            );
            self.stop_waiting(shard, "a WAIT came back short");
        }
        Ok(reply)
    }

    /// Marks the slots of `shard`; logs once when they were not marked yet.
    pub(super) fn stop_waiting(&self, shard: impl FnOnce() -> (String, Bits), why: &'static str) {
        let (name, slots) = shard();
        if self.unacked.add(&slots) {
            tracing::warn!(
                shard = %name,
                why,
                "completions and vouched claims of this shard no longer wait for its replicas (counted in \
                 idemgate_redis_wait_short_total) until they acknowledge a write again"
            );
        }
    }

    /// The slots whose completions skip `WAIT` now.
    pub fn unacked(&self) -> Bits {
        self.unacked.snapshot()
    }

    /// `probe` (in `slot`: something for the replicas to acknowledge), then `WAIT
    /// replicas`, pipelined on the slot's `WAIT` connection; whether that many replicas
    /// acknowledged within `redis.replica_ack_timeout` (false on any error). A round of
    /// vouched claims ([`super::acks`]) asks for one, the probe's recheck
    /// ([`Self::acknowledged`]) for `redis.replica_acks` (at least one).
    pub async fn acked_after_probe(&self, slot: u16, probe: Probe<'_>, replicas: i64) -> bool {
        let pipeline = self.lanes.for_slot(slot).pipeline();
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), true);
        let write: Result<(), _> = match probe {
            Probe::Set(key) => {
                (pipeline.set(key, 1, Some(Expiration::PX(60_000)), None, false)).await
            }
            Probe::Publish(channel) => pipeline.publish(channel, 1).await,
        };
        let asked: Result<(), _> = pipeline.custom(wait, vec![replicas, self.timeout_ms]).await;
        if write.is_err() || asked.is_err() {
            return false;
        }
        let mut results = pipeline.try_all::<Value>().await.into_iter();
        match (results.next(), results.next()) {
            (Some(Ok(_)), Some(Ok(acked))) => acked.as_i64().unwrap_or(0) >= replicas,
            _ => false,
        }
    }

    /// The probe's check of a shard in [`Self::unacked`]: a throw-away write to
    /// `probe_key` (of `slot`: something for the replicas to acknowledge), then `WAIT`,
    /// pipelined on the slot's `WAIT` connection. If enough replicas acknowledge within
    /// `redis.replica_ack_timeout`, completions of `slots` wait for them again (true,
    /// once). Behind a queue of earlier `WAIT`s the check times out and nothing changes.
    pub async fn acknowledged(&self, slot: u16, probe_key: &str, slots: &Bits) -> bool {
        let replicas = self.replicas.max(1);
        self.acked_after_probe(slot, Probe::Set(probe_key), replicas)
            .await
            && self.unacked.remove(slots)
    }

    /// Closes the connections.
    pub async fn quit(&self) {
        let _ = self.lanes.pool().quit().await;
    }

    /// The server these connections send commands of `slot` to now, if they agree
    /// ([`super::lanes::route`]).
    pub(super) fn route(&self, slot: u16) -> Option<fred::prelude::Server> {
        self.lanes.route(slot)
    }

    /// The `WAIT` connections (for the sentinel watch's check of where they point).
    pub fn pool(&self) -> &Pool {
        self.lanes.pool()
    }

    /// Makes new connections (after the sentinels named another primary).
    pub async fn reconnect(&self, within: std::time::Duration) {
        let _ = tokio::time::timeout(within, self.lanes.pool().force_reconnection()).await;
    }
}
