//! Redis as the claim and response store: [`RedisStore`], its connections, and what
//! every script shares (the record keys, the loaded scripts, the one decoder of record
//! replies). One file per Lua script holds its Rust side, named after it (`claim` for
//! `lua/claim.lua`, then `complete`, `release`, `extend`, `join_waiters`, `peek`, `invalidate`, `live`,
//! `live_read`).
//! Beside them: the pool ([`connect`]), its split between shards ([`lanes`]), `WAIT`
//! for replicas ([`replicas`]), what a primary vouches for ([`vouch`]) and the rounds
//! of replica acknowledgements of vouched claims (`acks`), the shard map and probes (`shards`), hash slots and
//! warmth markers ([`slots`], [`cold_slots`]; what they vouch for is decided beside the
//! tier logic, in `store::tiers::warmth`), the circuit breaker ([`breaker`]),
//! the Sentinel watch ([`sentinel_watch`]) and the waiters' subscription ([`waiters`]).
//!
//! Every script is safe to run twice with the same arguments, because fred re-sends
//! a command that was in flight when its connection dropped. Scripts run with
//! `EVALSHA` and reload themselves after `NOSCRIPT` (a restarted or failed-over Redis:
//! [`scripts`]).
//!
//! Keys: `<prefix>:{<record id hex>}`; the braces are a Redis Cluster hash tag, so
//! every key of one record lands in one slot, and so do its completion channel and the
//! warmth marker the claim script reads ([`slots`]): every script runs in one
//! slot ([`RedisStore::script_keys`] lists what each is given, for the test that
//! proves it). In cluster mode completions publish on sharded pub/sub (`SPUBLISH`).

mod acks;
pub mod breaker;
mod claim;
pub mod cold_slots;
mod complete;
pub mod connect;
pub mod epochs;
mod extend;
pub(crate) mod invalidate;
mod join_waiters;
pub mod lanes;
pub mod live;
pub mod live_read;
mod peek;
mod record_reply;
mod release;
pub mod replicas;
mod scripts;
pub mod sentinel_watch;
mod shards;
pub mod slots;
pub mod vouch;
pub mod waiters;

pub use self::claim::OnLapsed;
pub use self::invalidate::{Invalidated, Leases};
pub(crate) use self::record_reply::decode_record_reply;
pub use self::record_reply::{Lapsed, Record, Young};
pub use self::shards::Shard;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{ClientLike, Error as FredError, Pool, Value};
use fred::types::scripts::Script;

use self::epochs::Epochs;
use self::lanes::Lanes;
use self::replicas::ReplicaWait;
use self::slots::SlotMarkers;
use self::vouch::{Vouch, Vouched};
use super::StoreError;
use crate::config::{RedisConfig, RedisMode};
use crate::idempotency::RecordId;
use crate::metrics;

/// A script that reads or writes a record: `lua/record.lua` (the record's layouts and
/// the functions that read and write them), then `lua/<name>.lua`.
macro_rules! record_script {
    ($name:literal) => {
        concat!(
            include_str!("../../../lua/record.lua"),
            include_str!(concat!("../../../lua/", $name, ".lua"))
        )
    };
}
pub(crate) use record_script;

const CLAIM_LUA: &str = record_script!("claim");
const COMPLETE_LUA: &str = record_script!("complete");
const RELEASE_LUA: &str = record_script!("release");
const PEEK_LUA: &str = record_script!("peek");
const EXTEND_LUA: &str = record_script!("extend");
const JOIN_WAITERS_LUA: &str = include_str!("../../../lua/join_waiters.lua");
const LIVE_LUA: &str = record_script!("live");
const LIVE_READ_LUA: &str = record_script!("live_read");

/// What an acquired Redis claim carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The record's fencing token for this acquisition.
    pub fence: i64,
    /// Age of the warmth marker, read in the same script: how long this Redis has
    /// provably held every write (0 when it was absent and set just now).
    pub marker_age: Duration,
    /// Whether Redis keeps this claim durable (`claims = "vouched"`; else `NotAsked`),
    /// judged by [`RedisStore::claim`] from the primary's settings and the `WAIT`.
    pub vouched: Vouched,
    /// It took over a lease that ran out with no completion (a record that outlives its
    /// lease: vouched claims): its holder went away mid-call.
    pub after_lapse: bool,
    /// Vouched claims: the key holds a lapsed lease, which this claim did not take over
    /// but asks about first (`lua/claim.lua`, "P"); nothing was written, and the other
    /// fields say nothing.
    pub lapsed: Option<Lapsed>,
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

/// Connections to Redis plus the loaded scripts. Cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The pool, split between the cluster's shards ([`Lanes`]).
    lanes: Lanes,
    /// `redis.replica_acks` > 0: completions run with `WAIT` on these connections;
    /// vouched claims too, where their primary has replicas.
    replica_wait: Option<ReplicaWait>,
    /// `claims = "vouched"`: what each primary runs.
    vouch: Option<Vouch>,
    /// With `[postgres]`: the epoch markers, read by every claim.
    epochs: Option<Epochs>,
    prefix: String,
    markers: SlotMarkers,
    ops: metrics::RedisOps,
    /// `SPUBLISH` (cluster: sharded pub/sub) or `PUBLISH`, for completions and releases.
    publish: &'static str,
    /// From what age (ms) a warmth marker vouches: the claim script checks the
    /// marker's origin only from then on ([`RedisStore::set_vouch_after`]); `u64::MAX`
    /// (the default): the mode never uses the verdict, so the marker is not read.
    vouch_after_ms: AtomicU64,
    /// `redis.record_format`: the ARGV flag of the scripts that write new records,
    /// `"hash"` (the previous layout) or `"string"`.
    record_format: &'static str,
    claim: Script,
    complete: Script,
    release: Script,
    peek: Script,
    extend: Script,
    join_waiters: Script,
    live: Script,
    live_read: Script,
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
        Self::connect_with(config, None, None).await
    }

    /// [`Self::connect`]; with a `quarantine` (every mode with `[postgres]`), claims
    /// read the epoch markers, and a slot that lost its data is not trusted alone for
    /// that long ([`epochs::Epochs::quarantine`]); with `vouching` as well, claims are
    /// vouched (`claims = "vouched"`) and a leased record outlives its lease by that
    /// long ([`vouch::Vouch::remember`]).
    pub async fn connect_with(
        config: &RedisConfig,
        quarantine: Option<Duration>,
        vouching: Option<Duration>,
    ) -> Result<Self, FredError> {
        let pool =
            self::connect::build_pool(config, config.pool_size, self::connect::Resends::Allowed)?;
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
        let replica_wait = ReplicaWait::connect(config, vouching.is_some()).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                lanes,
                replica_wait,
                vouch: vouching
                    .map(|remember| Vouch::new(remember, config.mode != RedisMode::Standalone)),
                epochs: quarantine.map(|q| Epochs::new(&config.key_prefix, q)),
                prefix: config.key_prefix.clone(),
                markers: SlotMarkers::new(&config.key_prefix, "warm"),
                ops: metrics::RedisOps::new(),
                publish: if config.mode == RedisMode::Cluster {
                    "SPUBLISH"
                } else {
                    "PUBLISH"
                },
                vouch_after_ms: AtomicU64::new(u64::MAX),
                record_format: config.record_format.as_str(),
                claim: Script::from_lua(CLAIM_LUA),
                complete: Script::from_lua(COMPLETE_LUA),
                release: Script::from_lua(RELEASE_LUA),
                peek: Script::from_lua(PEEK_LUA),
                extend: Script::from_lua(EXTEND_LUA),
                join_waiters: Script::from_lua(JOIN_WAITERS_LUA),
                live: Script::from_lua(LIVE_LUA),
                live_read: Script::from_lua(LIVE_READ_LUA),
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

    /// Whether claims are vouched (`claims = "vouched"`).
    pub fn vouches(&self) -> bool {
        self.inner.vouch.is_some()
    }

    /// The marker age from which warmth may vouch, if claims read the marker.
    fn vouch_after(&self) -> Option<i64> {
        let ms = self.inner.vouch_after_ms.load(Ordering::Relaxed);
        (ms != u64::MAX).then(|| i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// For one record key, the keys and channels each script is given (KEYS, and the
    /// channel it publishes on), built by the same functions the calls use: every one
    /// must be in the record's slot.
    pub fn script_keys(&self, key: &str) -> Vec<(&'static str, Vec<String>)> {
        let one = vec![key.to_string()];
        let with_channel = vec![key.to_string(), channel(key)];
        let with_live = vec![key.to_string(), live::live_key(key), channel(key)];
        vec![
            ("claim", self.claim_keys(key, slots::slot(key), true)),
            ("complete", with_channel.clone()),
            ("release", with_live.clone()),
            ("peek", one.clone()),
            ("extend", one),
            ("invalidate", with_live.clone()),
            ("wait", vec![waiters_key(key)]),
            ("live", with_live.clone()),
            ("live_read", with_live),
        ]
    }

    /// Completion channel of a record key.
    pub fn channel(&self, key: &str) -> String {
        channel(key)
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.inner.lanes.pool().next().ping::<()>(None).await?;
        Ok(())
    }

    /// Whether every connection of the pool goes to `addr` (sentinel mode: the
    /// primary the sentinels name; fred connects to the address they gave).
    /// A connection being re-made counts as neither. The `WAIT` connections
    /// (`redis.replica_acks`) must point there too, when they are connected at all.
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
        // Either layout (`lua/record.lua`): `{state, ttl ms, response bytes}` or nil.
        const INSPECT_LUA: &str = concat!(
            include_str!("../../../lua/record.lua"),
            "local v = rec_get(KEYS[1]) if not v then return false end\n",
            "return {v.s, redis.call('PTTL', KEYS[1]), v.r and #v.r or 0}\n"
        );
        let client = self.inner.lanes.for_key(key);
        let script = Script::from_lua(INSPECT_LUA);
        let call = || (key, Vec::<Value>::new());
        let reply: Option<(String, i64, i64)> = scripts::eval(&script, client, call).await?;
        Ok(reply.map(|(state, ttl_ms, stored_bytes)| RedisRecord {
            completed: state == "C",
            ttl_ms,
            stored_bytes,
        }))
    }
}

/// Whether every open connection of `pool` goes to `addr` (`None`: none is open).
fn points_to(pool: &Pool, addr: &(String, u16)) -> Option<bool> {
    let mut servers = lanes::destinations(pool, 0, false).peekable();
    servers.peek()?;
    Some(servers.all(|s| s.port == addr.1 && *s.host == *addr.0))
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
