//! Redis as the claim and response store: the connection pool and one Rust function
//! per Lua script (`lua/claim.lua`, `complete.lua`, `release.lua`, `extend.lua`,
//! `wait.lua`, `peek.lua`).
//!
//! Every script is safe to run twice with the same arguments, because fred re-sends
//! a command that was in flight when its connection dropped. Scripts run with
//! `EVALSHA` and reload themselves after `NOSCRIPT` (a restarted or failed-over Redis).
//!
//! Keys: `<prefix>:{<record id hex>}`; the braces are a Redis Cluster hash tag, so
//! every key of one record lands in one slot, and so do its completion channel and the
//! warmth marker the claim script reads ([`super::slots`]): every script runs in one
//! slot ([`RedisStore::script_keys`] lists what each is given, for the test that
//! proves it). In cluster mode completions publish on sharded pub/sub (`SPUBLISH`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::{
    ClientLike, Error as FredError, KeysInterface, Pool, PubsubInterface, SortedSetsInterface,
    Value,
};
use fred::types::scripts::Script;

use super::cold_slots::{all_slots, bits_of_range, Bits};
use super::redis_lanes::Lanes;
use super::redis_wait::ReplicaWait;
use super::slots::SlotMarkers;
use super::StoreError;
use crate::config::{RedisConfig, RedisMode};
use crate::idempotency::{Claim, Completion, Fingerprint, RecordId, Release, StoredRecord};
use crate::metrics;

const CLAIM_LUA: &str = include_str!("../../lua/claim.lua");
const COMPLETE_LUA: &str = include_str!("../../lua/complete.lua");
const RELEASE_LUA: &str = include_str!("../../lua/release.lua");
const PEEK_LUA: &str = include_str!("../../lua/peek.lua");
const EXTEND_LUA: &str = include_str!("../../lua/extend.lua");
const WAIT_LUA: &str = include_str!("../../lua/wait.lua");

/// What an acquired Redis claim carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    /// The record's fencing token for this acquisition.
    pub fence: i64,
    /// Age of the warmth marker, read in the same script: how long this Redis has
    /// provably held every write (0 when it was absent and set just now).
    pub marker_age: Duration,
}

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

/// A record as Redis holds it, for the admin API.
#[derive(Debug, Clone, Copy)]
pub struct RedisRecord {
    /// Completed (else leased).
    pub completed: bool,
    /// Time to live: the lease left, or the replay window left.
    pub ttl_ms: i64,
    /// Size of the stored response (0 while leased).
    pub stored_bytes: i64,
}

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

/// Connections to Redis plus the loaded scripts. Cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The pool, split between the cluster's shards ([`Lanes`]).
    lanes: Lanes,
    /// `redis.wait_replicas` > 0: completions run with `WAIT` on these connections.
    replica_wait: Option<ReplicaWait>,
    prefix: String,
    markers: SlotMarkers,
    ops: metrics::RedisOps,
    /// `SPUBLISH` (cluster: sharded pub/sub) or `PUBLISH`, for completions and releases.
    publish: &'static str,
    /// From what age (ms) a warmth marker vouches: the claim script checks the
    /// marker's origin only from then on ([`RedisStore::set_vouch_after`]); `u64::MAX`
    /// (the default): the mode never uses the verdict, so the marker is not read.
    vouch_after_ms: AtomicU64,
    claim: Script,
    complete: Script,
    release: Script,
    peek: Script,
    extend: Script,
    wait: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl RedisStore {
    /// Builds the pool and starts connecting. Does not fail when Redis is down: the
    /// pool keeps reconnecting and calls fail with [`StoreError`] until it answers.
    pub async fn connect(config: &RedisConfig) -> Result<Self, FredError> {
        let pool = super::redis_connect::build_pool(config, config.pool_size)?;
        // Lanes listen for (re)connections before the first one.
        let lanes = Lanes::new(pool, config.mode == RedisMode::Cluster);
        let pool = lanes.pool();
        pool.connect();
        let connected = tokio::time::timeout(config.connect_timeout, pool.wait_for_connect()).await;
        if !matches!(connected, Ok(Ok(()))) {
            tracing::warn!(url = %crate::config::redact_url(&config.url), mode = config.mode.as_str(),
                "redis is not reachable yet; keyed requests answer 503 until it is");
        }
        lanes.refresh();
        let replica_wait = ReplicaWait::connect(config).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                lanes,
                replica_wait,
                prefix: config.key_prefix.clone(),
                markers: SlotMarkers::new(&config.key_prefix),
                ops: metrics::RedisOps::new(),
                publish: if config.mode == RedisMode::Cluster {
                    "SPUBLISH"
                } else {
                    "PUBLISH"
                },
                vouch_after_ms: AtomicU64::new(u64::MAX),
                claim: Script::from_lua(CLAIM_LUA),
                complete: Script::from_lua(COMPLETE_LUA),
                release: Script::from_lua(RELEASE_LUA),
                peek: Script::from_lua(PEEK_LUA),
                extend: Script::from_lua(EXTEND_LUA),
                wait: Script::from_lua(WAIT_LUA),
            }),
        })
    }

    /// The Redis key of a record.
    pub fn record_key(&self, record: RecordId) -> String {
        // `<prefix>:{<hex>}`, built without the formatting machinery (every request).
        let prefix = &self.inner.prefix;
        let mut key = String::with_capacity(prefix.len() + 2 + 64 + 1);
        key.push_str(prefix);
        key.push_str(":{");
        record.push_hex(&mut key);
        key.push('}');
        key
    }

    /// Whether completions publish on sharded pub/sub (cluster mode).
    pub fn sharded_pubsub(&self) -> bool {
        self.inner.publish == "SPUBLISH"
    }

    /// The marker age from which warmth may vouch for a shard (the longest ttl): the
    /// claim script checks the marker's origin once it is that old. `None`: the mode
    /// never uses the verdict (Redis only, write-through claims), so claims neither
    /// read nor write the marker.
    pub fn set_vouch_after(&self, age: Option<Duration>) {
        let ms = age.map_or(u64::MAX, |a| {
            u64::try_from(a.as_millis()).unwrap_or(u64::MAX - 1)
        });
        self.inner.vouch_after_ms.store(ms, Ordering::Relaxed);
    }

    /// The marker age from which warmth may vouch, if claims read the marker.
    fn vouch_after(&self) -> Option<i64> {
        let ms = self.inner.vouch_after_ms.load(Ordering::Relaxed);
        (ms != u64::MAX).then(|| i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// KEYS of the claim script for a record key, with the slot's warmth marker when
    /// `marker` (where claims read it).
    fn claim_keys(&self, key: &str, marker: bool) -> Vec<String> {
        let mut keys = vec![key.to_string(), fence_key(key)];
        if marker {
            keys.push(self.inner.markers.for_key(key).to_string());
        }
        keys
    }

    /// For one record key, the keys and channels each script is given (KEYS, and the
    /// channel it publishes on), built by the same functions the calls use: every one
    /// must be in the record's slot.
    pub fn script_keys(&self, key: &str) -> Vec<(&'static str, Vec<String>)> {
        let one = vec![key.to_string()];
        let with_channel = vec![key.to_string(), channel(key)];
        vec![
            ("claim", self.claim_keys(key, true)),
            ("complete", with_channel.clone()),
            ("release", with_channel),
            ("peek", one.clone()),
            ("extend", one.clone()),
            ("invalidate", one),
            ("wait", vec![waiters_key(key)]),
        ]
    }

    /// Runs `lua/claim.lua`.
    ///
    /// KEYS: `[record key, fence key, warmth marker of the record's slot]` (the marker
    /// only where the mode uses it). ARGV: `[fingerprint (32 bytes), lock token, lease
    /// ms, fence key ttl ms, vouch-after ms]`.
    /// Reply: `{"A", fence, marker age ms}` acquired with its fencing token (age 0
    /// without the marker),
    /// `{"C", encoded response, remaining ms}` completed with this fingerprint,
    /// `{"I", remaining ms}` leased by another token (the record is then marked as
    /// waited for: its completion or release publishes), `{"M"}` another fingerprint;
    /// decoded by [`decode_record_reply`], the one decoder of record replies.
    ///
    /// A claim that fails may still have landed: its token is released in the
    /// background on the same connection (a compare-and-delete, harmless if it never
    /// ran) and the error returned, so the caller never forwards an unclaimed request.
    pub async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
        fence_ttl: Duration,
    ) -> Result<Claim<Acquired, StoredRecord>, StoreError> {
        let args = || -> Vec<Value> {
            vec![
                Bytes::copy_from_slice(fingerprint.as_bytes()).into(),
                token.into(),
                millis(lease).into(),
                millis(fence_ttl).into(),
                self.vouch_after().unwrap_or(0).into(),
            ]
        };
        let marker = self.vouch_after().is_some();
        let started = Instant::now();
        let client = self.inner.lanes.for_key(key);
        let script = &self.inner.claim;
        let mut reply: Result<Value, FredError> = script
            .evalsha_with_reload(client, self.claim_keys(key, marker), args())
            .await;
        // While its slot migrates between primaries (resharding), Redis answers
        // `-TRYAGAIN` to a script whose keys are split between the two nodes (the
        // marker already moved, the new record not there yet): the claim ran nowhere,
        // so it is sent again (the same token: safe to re-send) once the keys moved,
        // for up to ~1.6 s (a slot of many keys takes a while to move).
        for pause in [5, 20, 50, 100, 200, 400, 800] {
            match &reply {
                Err(e) if slot_migrating(e) => {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    reply = script
                        .evalsha_with_reload(client, self.claim_keys(key, marker), args())
                        .await;
                }
                _ => break,
            }
        }
        metrics::elapsed(&self.inner.ops.claim, started);
        let reply = match reply {
            Ok(v) => v,
            Err(e) => {
                // A slow answer on a live connection is not an outage: the caller answers
                // 503 for this request but keeps claims in Redis. Only a lost connection
                // counts as Redis being unavailable (and may move claims elsewhere).
                let slow = e.kind() == &fred::error::ErrorKind::Timeout && client.is_connected();
                let (client, script) = (client.clone(), self.inner.release.clone());
                let publish = self.inner.publish;
                let args = vec![token.to_string(), channel(key), publish.to_string()];
                let key = key.to_string();
                tokio::spawn(async move {
                    let released: Result<i64, FredError> =
                        script.evalsha_with_reload(&client, key, args).await;
                    if let Err(e) = released {
                        tracing::debug!(error = %e, "could not release a claim of unknown outcome");
                    }
                });
                return Err(match e.kind() {
                    fred::error::ErrorKind::Timeout if !slow => StoreError::Unavailable(e),
                    _ => StoreError::from(e),
                });
            }
        };
        match decode_record_reply("claim", reply)? {
            Record::Acquired(acquired) => Ok(Claim::Acquired(acquired)),
            Record::Known(claim) => Ok(claim),
            Record::Absent => Err(StoreError::Protocol {
                script: "claim",
                detail: "absent is not a claim reply".into(),
            }),
        }
    }

    /// Runs `lua/peek.lua`: what a record holds, without claiming it.
    ///
    /// KEYS: `[record key]`. ARGV: `[fingerprint (32 bytes)]`.
    /// Reply: `{"C", encoded response, remaining ms}`, `{"I", remaining ms}`, `{"M"}`,
    /// or `{"N"}` absent; decoded by [`decode_record_reply`].
    pub async fn peek(&self, key: &str, fingerprint: &Fingerprint) -> Result<Record, StoreError> {
        let args: Vec<Value> = vec![Bytes::copy_from_slice(fingerprint.as_bytes()).into()];
        let started = Instant::now();
        let reply: Value = (self.inner.peek)
            .evalsha_with_reload(self.inner.lanes.for_key(key), key, args)
            .await?;
        metrics::elapsed(&self.inner.ops.peek, started);
        decode_record_reply("peek", reply)
    }

    /// Runs `lua/complete.lua`.
    ///
    /// KEYS: `[record key]`. ARGV: `[lock token, encoded response, ttl ms, fingerprint,
    /// completion channel, "PUBLISH" or "SPUBLISH"]`.
    /// Reply: `1` stored (or already stored by this token, or the record had expired
    /// unclaimed), `0` another token holds the record: nothing was written. Publishes on
    /// the channel only if a claim answered "in flight" for the record (or it had expired).
    pub async fn complete(
        &self,
        key: &str,
        token: &str,
        encoded: Bytes,
        ttl: Duration,
        fingerprint: &Fingerprint,
    ) -> Result<Completion, StoreError> {
        let args: Vec<Value> = vec![
            token.into(),
            encoded.into(),
            millis(ttl).into(),
            Bytes::copy_from_slice(fingerprint.as_bytes()).into(),
            channel(key).into(),
            self.inner.publish.into(),
        ];
        let started = Instant::now();
        let reply: i64 = match &self.inner.replica_wait {
            None => {
                (self.inner.complete)
                    .evalsha_with_reload(self.inner.lanes.for_key(key), key, args)
                    .await?
            }
            Some(w) => {
                let slot = super::slots::slot(key);
                if w.waits(slot) {
                    let shard = || {
                        let shard = self.shard_of(slot);
                        (shard.name, shard.slots)
                    };
                    (w.complete(&self.inner.complete, key, args, shard).await?).convert()?
                } else {
                    // Its shard's replicas are not acknowledging (`redis_wait`): no WAIT.
                    metrics::redis_wait_short();
                    (self.inner.complete)
                        .evalsha_with_reload(self.inner.lanes.for_slot(slot), key, args)
                        .await?
                }
            }
        };
        metrics::elapsed(&self.inner.ops.complete, started);
        Ok(match reply {
            1 => Completion::Stored,
            _ => Completion::LeaseLost,
        })
    }

    /// Runs `lua/release.lua`.
    ///
    /// KEYS: `[record key]`. ARGV: `[lock token, completion channel, "PUBLISH" or
    /// "SPUBLISH"]`.
    /// Reply: `1` released (or already gone), `0` not held by this token. Publishes on
    /// the channel only if a claim answered "in flight" for the record.
    pub async fn release(&self, key: &str, token: &str) -> Result<Release, StoreError> {
        let started = Instant::now();
        let reply: i64 = (self.inner.release)
            .evalsha_with_reload(
                self.inner.lanes.for_key(key),
                key,
                vec![
                    token.to_string(),
                    channel(key),
                    self.inner.publish.to_string(),
                ],
            )
            .await?;
        metrics::elapsed(&self.inner.ops.release, started);
        Ok(match reply {
            1 => Release::Released,
            _ => Release::NotHeld,
        })
    }

    /// Runs `lua/extend.lua`: the lease holder's heartbeat.
    ///
    /// KEYS: `[record key]`. ARGV: `[lock token, lease ms]`.
    /// Reply: `1` extended, `0` the lease is not ours any more.
    pub async fn extend(
        &self,
        key: &str,
        token: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let started = Instant::now();
        let args: Vec<Value> = vec![token.into(), millis(lease).into()];
        let reply: i64 = (self.inner.extend)
            .evalsha_with_reload(self.inner.lanes.for_key(key), key, args)
            .await?;
        metrics::elapsed(&self.inner.ops.extend, started);
        Ok(reply == 1)
    }

    /// Runs `lua/wait.lua`: joins the fleet-wide waiters of a record as `id`.
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
        let args: Vec<Value> = vec![i64::from(max).into(), id.into(), millis(lifetime).into()];
        let reply: i64 = (self.inner.wait)
            .evalsha_with_reload(self.inner.lanes.for_key(key), waiters_key(key), args)
            .await?;
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

    /// Completion channel of a record key.
    pub fn channel(&self, key: &str) -> String {
        channel(key)
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

    /// The shards as fred routes them now: in a cluster, each primary with its slots
    /// (from the first client that knows the slot map: one reconnecting may not);
    /// otherwise (or before the cluster's slot map is known) one shard of every slot.
    pub fn shards(&self) -> Vec<Shard> {
        let mut shards: Vec<Shard> = Vec::new();
        for (name, ranges) in super::redis_lanes::primaries(self.inner.lanes.pool()) {
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
        super::redis_lanes::on_events(self.inner.lanes.pool(), changed);
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
    fn probe_key(&self, slot: u16) -> String {
        format!("{}:probe", self.inner.markers.all()[usize::from(slot)])
    }

    /// Whether completions wait for replicas (`redis.wait_replicas` > 0).
    pub fn waits_for_replicas(&self) -> bool {
        self.inner.replica_wait.is_some()
    }

    /// `redis.wait_replicas`: for every shard whose completions skip `WAIT` because its
    /// replicas stopped acknowledging, checks whether they acknowledge a write again
    /// (then its completions wait for them again). Shards are checked together; each
    /// check takes up to `redis.wait_timeout`. Nothing to do without `wait_replicas`.
    pub async fn recheck_replicas(&self) {
        let Some(unacked) = self.inner.replica_wait.as_ref().map(|w| w.unacked()) else {
            return;
        };
        if unacked.iter().all(|w| *w == 0) {
            return;
        }
        let shards = (self.shards().into_iter())
            .filter(|s| s.slots.iter().zip(&unacked).any(|(s, u)| s & u != 0));
        let mut checks = tokio::task::JoinSet::new();
        for shard in shards {
            let store = self.clone();
            checks.spawn(async move {
                let Some(wait) = &store.inner.replica_wait else {
                    return;
                };
                let key = store.probe_key(shard.probe_slot);
                if wait
                    .acknowledged(shard.probe_slot, &key, &shard.slots)
                    .await
                {
                    tracing::info!(shard = %shard.name, "the replicas acknowledge writes \
                        again: completions of this shard wait for them again");
                }
            });
        }
        checks.join_all().await;
    }

    /// Deletes the warmth marker of `record_key`'s slot only (one `DEL`): the slot of a
    /// record Redis lacks counts as cold at once, before [`Self::reset_markers`]
    /// lands.
    pub async fn reset_slot_marker(&self, record_key: &str) -> Result<(), StoreError> {
        let marker = self.inner.markers.for_key(record_key);
        let _: i64 = self.inner.lanes.for_key(record_key).del(marker).await?;
        Ok(())
    }

    /// `CONFIG GET maxmemory-policy`.
    pub async fn maxmemory_policy(&self) -> Result<String, StoreError> {
        self.config_get("maxmemory-policy").await
    }

    /// `CONFIG GET cluster-require-full-coverage` (of one node: a cluster's nodes are
    /// configured alike).
    pub async fn cluster_requires_full_coverage(&self) -> Result<bool, StoreError> {
        Ok(self.config_get("cluster-require-full-coverage").await? == "yes")
    }

    /// `CONFIG GET <name>` of one node.
    async fn config_get(&self, name: &'static str) -> Result<String, StoreError> {
        let reply: Vec<String> = (self.inner.lanes.pool().next())
            .custom(fred::cmd!("CONFIG"), vec!["GET", name])
            .await?;
        reply.get(1).cloned().ok_or(StoreError::Protocol {
            script: "CONFIG GET",
            detail: format!("no {name}"),
        })
    }

    /// What Redis holds for a record key (admin API; not on the request path).
    pub async fn inspect(&self, key: &str) -> Result<Option<RedisRecord>, StoreError> {
        let client = self.inner.lanes.for_key(key);
        let state: Option<String> = client.custom(fred::cmd!("HGET"), vec![key, "s"]).await?;
        let Some(state) = state else {
            return Ok(None);
        };
        let ttl_ms: i64 = client.pttl(key).await?;
        let bytes: i64 = client.custom(fred::cmd!("HSTRLEN"), vec![key, "r"]).await?;
        Ok(Some(RedisRecord {
            completed: state == "C",
            ttl_ms,
            stored_bytes: bytes,
        }))
    }

    /// Runs `lua/invalidate.lua` (admin API): deletes the record unless a lease holds it
    /// and `force` is false, checked and deleted in one step.
    ///
    /// KEYS: `[record key]`. ARGV: `[force, "1" or "0"]`.
    /// Reply: `{"D"}` deleted, `{"L", remaining ms}` leased (nothing deleted), `{"A"}`
    /// absent; decoded by [`decode_invalidate_reply`]. Re-sent after a dropped
    /// connection, a delete that had already run answers `Absent`.
    pub async fn invalidate(&self, key: &str, force: bool) -> Result<Invalidated, StoreError> {
        // Built per call rather than kept in `Inner`: the admin API is not on the request path.
        let script = Script::from_lua(include_str!("../../lua/invalidate.lua"));
        let started = Instant::now();
        let force = if force { "1" } else { "0" };
        let reply: Value =
            (script.evalsha_with_reload(self.inner.lanes.for_key(key), key, vec![force])).await?;
        metrics::elapsed(&self.inner.ops.invalidate, started);
        decode_invalidate_reply(reply)
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.inner.lanes.pool().next().ping::<()>(None).await?;
        Ok(())
    }

    /// Whether every connection of the pool goes to `addr` (sentinel mode: the
    /// primary the sentinels name; fred connects to the address they gave).
    /// A connection being re-made counts as neither. The `WAIT` connections
    /// (`redis.wait_replicas`) must point there too, when they are connected at all.
    pub fn connected_to(&self, addr: &(String, u16)) -> bool {
        let wait_ok = (self.inner.replica_wait.as_ref())
            .map_or(true, |w| points_to(w.pool(), addr) != Some(false));
        wait_ok && points_to(self.inner.lanes.pool(), addr) == Some(true)
    }

    /// Drops every connection and makes new ones (sentinel mode: asking the sentinels
    /// again), without waiting longer than `within`.
    pub async fn reconnect(&self, within: Duration) {
        let _ = tokio::time::timeout(within, self.inner.lanes.pool().force_reconnection()).await;
        if let Some(w) = &self.inner.replica_wait {
            w.reconnect(within).await;
        }
    }

    /// Closes the connections.
    pub async fn quit(&self) {
        if let Some(w) = &self.inner.replica_wait {
            w.quit().await;
        }
        let _ = self.inner.lanes.pool().quit().await;
    }
}

/// Whether every open connection of `pool` goes to `addr` (`None`: none is open).
fn points_to(pool: &Pool, addr: &(String, u16)) -> Option<bool> {
    let mut any = false;
    for client in pool.clients() {
        for server in client.active_connections() {
            if server.port != addr.1 || *server.host != *addr.0 {
                return Some(false);
            }
            any = true;
        }
    }
    any.then_some(true)
}

/// The record's fencing counter: same hash tag, so the same cluster slot.
fn fence_key(record_key: &str) -> String {
    format!("{record_key}:n")
}

/// The fleet-wide set of duplicates waiting on a record (`:ws`: a sorted set; `:w`
/// was the counter of earlier versions, left to expire on its own).
fn waiters_key(record_key: &str) -> String {
    format!("{record_key}:ws")
}

/// Where completion and release of a record are published.
fn channel(record_key: &str) -> String {
    format!("{record_key}:done")
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// A record reply of the claim or peek script, decoded.
#[derive(Debug)]
pub enum Record {
    /// The claim script took the lease.
    Acquired(Acquired),
    /// Completed (the record as stored: maybe sealed), leased by another token, or
    /// another fingerprint.
    Known(Claim<Acquired, StoredRecord>),
    /// No record (peek only).
    Absent,
}

/// The one decoder of the replies of `claim.lua` and `peek.lua`.
pub(crate) fn decode_record_reply(
    script: &'static str,
    reply: Value,
) -> Result<Record, StoreError> {
    let bad = |detail: &str| StoreError::Protocol {
        script,
        detail: detail.to_string(),
    };
    let ms = |v: &Value, what: &str| {
        (v.as_i64())
            .map(|ms| Duration::from_millis(ms.max(0) as u64))
            .ok_or_else(|| bad(what))
    };
    let Value::Array(mut items) = reply else {
        return Err(bad("not an array"));
    };
    let tag = items.first().and_then(|v| v.as_bytes_str());
    match tag.as_deref() {
        Some("A") if items.len() == 3 => Ok(Record::Acquired(Acquired {
            fence: (items[1].as_i64()).ok_or_else(|| bad("fence is not a number"))?,
            marker_age: ms(&items[2], "marker age is not a number")?,
        })),
        Some("C") if items.len() == 3 => {
            let remaining = ms(&items[2], "remaining ttl is not a number")?;
            let raw = (items.swap_remove(1).into_bytes()).ok_or_else(|| bad("no response"))?;
            let response = StoredRecord::decode(raw).map_err(StoreError::Corrupt)?;
            Ok(Record::Known(Claim::Completed {
                response,
                remaining,
            }))
        }
        Some("I") if items.len() == 2 => Ok(Record::Known(Claim::InFlight {
            remaining: ms(&items[1], "remaining lease is not a number")?,
        })),
        Some("M") => Ok(Record::Known(Claim::Mismatch)),
        Some("N") => Ok(Record::Absent),
        _ => Err(bad("unknown reply tag")),
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

/// Whether Redis refused a command because its slot is being migrated and the
/// command's keys are split between the two nodes (`-TRYAGAIN`; fred has no kind for
/// it): retry after a moment, as the cluster specification says.
fn slot_migrating(e: &FredError) -> bool {
    e.details().starts_with("TRYAGAIN")
}
