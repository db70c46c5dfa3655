//! `[redis]`, the claim and response store, with its rules (the topology's are in
//! [`topology`](super::topology), `WAIT`'s in [`replication`](super::replication)), and
//! `[replay_cache]`, the completed records each replica keeps in front of it.

use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::error::{positive_duration, ConfigError};
use super::replication;
use super::tls::RedisTls;
use super::topology::{self, RedisMode, SentinelConfig};
use super::url_secrets::url_password;

/// `[redis]`: the claim and response store.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `standalone` (`url`), `cluster` (`nodes`) or `sentinel` (`[redis.sentinel]`).
    pub mode: RedisMode,
    /// `redis://[user:password@]host:port[/db]` (standalone), or `rediss://` for TLS.
    pub url: String,
    /// Cluster seed nodes, `redis://[user:password@]host:port` (cluster).
    pub nodes: Vec<String>,
    /// The sentinels and the service they monitor (sentinel).
    pub sentinel: SentinelConfig,
    /// Prefix of every key the gateway writes.
    pub key_prefix: String,
    /// Deadline of one Redis command; a claim that times out is treated as unknown.
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    /// Deadline of one connection attempt.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Connections to Redis; commands are pipelined over each. Each connection has one
    /// fred task that writes, reads and decodes all its calls, so one connection costs
    /// Redis fewer syscalls and CPU per request but makes that task the gateway's
    /// bottleneck; four (the default) carry more first executions than one (the
    /// `redis.pool_size = 1` row of BENCHMARKS.md, "Results"; how it was chosen:
    /// docs/history/benchmarks.md). The `WAIT` connections of `replica_acks` are a pool
    /// of their own. In cluster mode the clients are split between the shards (each
    /// client connects to every primary but sends only its own shards' keys), so that a
    /// primary that stops answering stalls its own shard only: give at least as many as
    /// the cluster has primaries, or shards share clients and one unreachable primary
    /// delays the keys of the shards it shares with (a start-up warning says so).
    pub pool_size: usize,
    /// How often a probe checks Redis while it is down (to close the breaker), and
    /// its warmth marker while it is up.
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// Replicas that must acknowledge a completion (`WAIT`) before the answer; 0: none.
    /// Best effort: a completion they do not acknowledge within `replica_ack_timeout` is
    /// answered all the same (counted in `idemgate_redis_wait_short_total`), and from
    /// then on that shard's completions do not wait for them (counted too) until a check
    /// every `probe_interval` sees them acknowledge a write again (docs/guarantees.md).
    pub replica_acks: u32,
    /// The longest a completion waits for them (`redis.replica_acks` > 0).
    #[serde(with = "humantime_serde")]
    pub replica_ack_timeout: Duration,
    /// A file holding the password (instead of one in `url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    pub tls: RedisTls,
    /// How new records are written: `string` (one string with its expiry: fewer Redis
    /// commands per request) or `hash` (the layout of the previous release, whose
    /// replicas can read only that). Records of both layouts are read either way. Use
    /// `hash` for the duration of a rolling upgrade from the previous release, then
    /// switch to `string` once every replica runs this one (CHANGELOG.md).
    pub record_format: RecordFormat,
}

/// `redis.record_format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// One string with its expiry (`SET ... PX`), read with one `GET`.
    #[default]
    String,
    /// A hash `{s, f, t, n, r, w}` with `PEXPIRE`: the previous release's layout.
    Hash,
}

impl RecordFormat {
    /// The flag the scripts take.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Hash => "hash",
        }
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            mode: RedisMode::Standalone,
            url: "redis://127.0.0.1:6379".into(),
            nodes: Vec::new(),
            sentinel: SentinelConfig::default(),
            key_prefix: "idemgate".into(),
            command_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            pool_size: 4,
            probe_interval: Duration::from_secs(1),
            replica_acks: 0,
            replica_ack_timeout: replication::DEFAULT_REPLICA_ACK_TIMEOUT,
            password_file: None,
            tls: RedisTls::default(),
            record_format: RecordFormat::String,
        }
    }
}
impl RedisConfig {
    /// The rules of `[redis]`, its topology's and `WAIT`'s included.
    /// The rules vouched claims add (`postgres.claims = "vouched"`): they wait for one
    /// replica, in rounds, on `redis.replica_ack_timeout`.
    pub(super) fn check_vouched(&self) -> Result<(), ConfigError> {
        replication::check(1, self.replica_ack_timeout, self.command_timeout)
    }

    pub(super) fn check(&self) -> Result<(), ConfigError> {
        self.check_connection()?;
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::invalid(
                "redis.key_prefix",
                "must be non-empty and must not contain `{` or `}` (they are Redis Cluster hash tags)",
            ));
        }
        topology::check(self.mode, &self.nodes, &self.sentinel)?;
        replication::check(
            self.replica_acks,
            self.replica_ack_timeout,
            self.command_timeout,
        )?;
        positive_duration("redis.command_timeout", self.command_timeout)?;
        positive_duration("redis.connect_timeout", self.connect_timeout)?;
        positive_duration("redis.probe_interval", self.probe_interval)?;
        if !(1..=64).contains(&self.pool_size) {
            return Err(ConfigError::invalid(
                "redis.pool_size",
                "must be between 1 and 64",
            ));
        }
        Ok(())
    }

    /// `redis.url`, its TLS settings and its password.
    fn check_connection(&self) -> Result<(), ConfigError> {
        let tls = self.url.starts_with("rediss://");
        if !tls && !self.url.starts_with("redis://") {
            return Err(ConfigError::invalid(
                "redis.url",
                "must start with redis:// (or rediss:// for TLS)",
            ));
        }
        if !tls && self.tls.is_set() {
            // Settings for a TLS connection that is never made would suggest a protection
            // that is not there.
            return Err(ConfigError::invalid(
                "redis.tls",
                "is set but redis.url is not rediss://: the connection would be plaintext",
            ));
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(ConfigError::invalid(
                "redis.tls.cert_file",
                "cert_file and key_file go together: set both or neither",
            ));
        }
        if self.password_file.is_some() && url_password(&self.url) {
            return Err(ConfigError::invalid(
                "redis.password_file",
                "redis.url carries a password too: set it in one place",
            ));
        }
        Ok(())
    }
}

/// `[replay_cache]`: completed records kept in each replica's memory, so replays skip Redis.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayCacheConfig {
    /// Memory for cached responses, counted as the process spends it (each entry's
    /// response, headers and bookkeeping, allocator rounding included: about 870 bytes
    /// for a 600-byte response); `0` turns the cache off.
    pub max_bytes: ByteSize,
    /// Longest an entry is served from memory (bounds how long a missed admin
    /// invalidation can go unnoticed); entries also expire with their record.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

impl Default for ReplayCacheConfig {
    fn default() -> Self {
        Self {
            max_bytes: ByteSize::mib(16),
            max_age: Duration::from_secs(60),
        }
    }
}
impl ReplayCacheConfig {
    /// The bounds of `[replay_cache]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        positive_duration("replay_cache.max_age", self.max_age)
    }
}
