//! Configuration: the typed schema, its built-in defaults, and loading in layers
//! (defaults, then a TOML file, then `IDEMGATE__SECTION__KEY` environment variables).
//!
//! Loading never yields a half-valid value: [`Config::load`] deserialises straight
//! into the types the gateway uses (`http::Method`, `HeaderName`, `StatusCode`, the
//! upstream `Uri`, durations, sizes), with unknown keys rejected, and then runs
//! [`validate`](validate::validate) for the rules across keys, so every error names
//! the key it is about. Renamed settings are still read under their old spelling, with a
//! warning ([`deprecated`]). [`crate::App::build`] validates again, so a `Config` built or
//! changed in code cannot start unchecked.

mod deprecated;
mod encryption;
mod redacted_debug;
pub mod reference;
mod replication;
mod runtime;
mod tls;
mod topology;
mod typed;
mod validate;
mod warnings;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytesize::ByteSize;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use http::{HeaderName, Method, StatusCode, Uri};
use serde::{Deserialize, Serialize};

pub use deprecated::Deprecation;
pub use runtime::{worker_share, Runtime, Workers};
pub use tls::{read_secret, PostgresTls, RedisTls, ResolvedPgTls, SslMode, UpstreamTls};
pub use topology::{RedisMode, SentinelConfig};
pub use validate::validate;
pub use warnings::{warnings, Warning};

use crate::proxy::cidr::TrustedProxies;

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "IDEMGATE__";

/// The whole configuration of one gateway process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub log: LogConfig,
    pub admin: AdminConfig,
    pub replay_cache: ReplayCacheConfig,
    pub redis: RedisConfig,
    /// Absent: Redis-only mode (no durable tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresConfig>,
    pub idempotency: IdempotencyConfig,
    pub routes: Vec<RouteConfig>,
    /// `[encryption]`, read into its keys (the key files are read with the configuration).
    #[serde(with = "encryption", skip_serializing_if = "Option::is_none")]
    pub encryption: Option<crate::idempotency::Keyring>,
    /// Deprecated spellings this configuration used, each read into its new setting
    /// (warned about at start and by `check-config`); not a setting.
    #[serde(skip)]
    pub deprecated: Vec<Deprecation>,
}

/// `[server]`: listeners and limits of the HTTP edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address for proxied traffic.
    #[serde(with = "typed")]
    pub listen: SocketAddr,
    /// Address for `/healthz` and `/readyz`.
    #[serde(with = "typed")]
    pub admin_listen: SocketAddr,
    /// Largest request body read for a keyed request; larger is 413.
    pub max_request_body: ByteSize,
    /// Largest upstream response body the gateway buffers and stores.
    pub max_response_body: ByteSize,
    /// Largest request head (request line plus headers) a client may send.
    pub max_header_size: ByteSize,
    /// How long a client may take to send its request head (slowloris guard).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long a client may take to send the body of a keyed request; slower is 408.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Lingering close: after answering before the request body was read (413, 408, an
    /// early error), read and discard up to this many more bytes of it, so the client
    /// sees the answer instead of a reset. `0B` turns lingering off.
    pub linger_bytes: ByteSize,
    /// Lingering close: the longest the rest of a body is read and discarded for.
    #[serde(with = "humantime_serde")]
    pub linger_time: Duration,
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Peers (CIDRs) whose `X-Forwarded-*` and `Forwarded` headers are extended; from
    /// any other peer they are replaced. Empty: nobody is trusted.
    pub trusted_proxies: TrustedProxies,
    /// Most connections open on the proxy listener; beyond it, new connections wait in
    /// the kernel's accept queue, unserved, until one closes.
    pub max_connections: usize,
    /// Most requests being handled at once on the proxy listener; beyond it, 503
    /// `overloaded` with `Retry-After`.
    pub max_in_flight: usize,
    /// Longest a response write may wait for the client to read (no progress at all);
    /// then the connection is closed and the response it held freed.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Memory for buffered bodies (keyed request bodies, stored and replayed responses)
    /// across all requests; a keyed request that does not fit gets 503 `overloaded`.
    pub buffer_budget: ByteSize,
    /// `multi_thread` or `thread_per_core` ([`Runtime`]).
    pub runtime: Runtime,
    /// Worker threads: `"auto"` (the available cores) or a count ([`Workers`]).
    pub workers: Workers,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            max_request_body: ByteSize::mib(1),
            max_response_body: ByteSize::mib(8),
            max_header_size: ByteSize::kib(16),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            linger_bytes: ByteSize::mib(8),
            linger_time: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            trusted_proxies: TrustedProxies::default(),
            max_connections: 4096,
            max_in_flight: 1024,
            write_timeout: Duration::from_secs(30),
            buffer_budget: ByteSize::mib(256),
            runtime: Runtime::default(),
            workers: Workers::default(),
        }
    }
}

/// `[log]`: log format and filter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter directive such as `info` or `idemgate=debug`; `RUST_LOG` wins.
    pub filter: String,
    /// Lines the log writer thread may fall behind stderr by; beyond, lines are dropped
    /// (and counted) instead of making requests wait.
    pub queue_lines: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".into(),
            queue_lines: 64 * 1024,
        }
    }
}

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (the request span's fields under `span`).
    Json,
}

/// `[admin]`: the admin API on the admin listener.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Bearer token for `/admin/*`; absent means the admin API is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the token instead (`token` and `token_file` exclude each other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<std::path::PathBuf>,
}

/// `[replay_cache]`: completed records kept in each replica's memory, so replays skip Redis.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayCacheConfig {
    /// Memory for cached responses; `0` turns the cache off.
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
    /// fred task that writes, reads and decodes all its calls; four (the default) kept
    /// `make bench`'s first executions 28% faster than one, which costs Redis fewer
    /// syscalls and CPU per request but makes that task the bottleneck (BENCHMARKS.md,
    /// issue 15). The `WAIT` connections of `wait_replicas` are a pool of their own.
    /// In cluster mode the clients are split between the shards (each client
    /// connects to every primary but sends only its own shards' keys), so that a
    /// primary that stops answering stalls its own shard only: give at least as many
    /// as the cluster has primaries, or shards share clients and one unreachable
    /// primary delays the keys of the shards it shares with (a start-up warning says so).
    pub pool_size: usize,
    /// How often a probe checks Redis while it is down (to close the breaker), and
    /// its warmth marker while it is up.
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// Replicas that must acknowledge a completion (`WAIT`) before the answer; 0: none.
    /// Best effort: a completion they do not acknowledge within `wait_timeout` is
    /// answered all the same (counted in `idemgate_redis_wait_short_total`), and from
    /// then on that shard's completions do not wait for them (counted too) until a check
    /// every `probe_interval` sees them acknowledge a write again (docs/guarantees.md).
    pub wait_replicas: u32,
    /// The longest a completion waits for them (`redis.wait_replicas` > 0).
    #[serde(with = "humantime_serde")]
    pub wait_timeout: Duration,
    /// A file holding the password (instead of one in `url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    pub tls: RedisTls,
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
            wait_replicas: 0,
            wait_timeout: replication::DEFAULT_WAIT_TIMEOUT,
            password_file: None,
            tls: RedisTls::default(),
        }
    }
}

/// `[postgres]`: the durable tier.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// `postgres://user:password@host:port/dbname`; libpq's TLS parameters (`sslmode`...)
    /// may be given here or in `[postgres.tls]`.
    pub url: String,
    /// Connections to Postgres (per process; divided among the workers of
    /// `thread_per_core`).
    pub pool_size: usize,
    /// Apply `migrations/` at `serve` start.
    pub migrate_on_start: bool,
    /// When a Redis claim is acquired, whether to look the key up in Postgres first.
    pub lookup_on_miss: LookupOnMiss,
    /// Where claims are held: `write_through` (the default) also commits each claim to
    /// Postgres before forwarding; `redis` keeps them in Redis only (see [`ClaimDurability`]).
    pub claims: ClaimDurability,
    /// Deadline of one Postgres statement (claim, lookup, a write-through batch).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// Most records one write-through statement carries, most keys one batched lookup
    /// statement reads, and most claims one batched claim statement makes.
    pub batch_max: usize,
    /// Most records waiting for Postgres to come back; beyond it, records are dropped (and counted).
    pub retry_queue: usize,
    /// Most bytes of records waiting for Postgres; beyond it, records are dropped (and
    /// counted), so an outage cannot grow the queue past the process's memory.
    pub retry_queue_bytes: ByteSize,
    /// How often the reaper deletes expired records.
    #[serde(with = "humantime_serde")]
    pub reap_interval: Duration,
    /// Most rows one reaper statement deletes.
    pub reap_batch: usize,
    /// How often the completer looks for abandoned requests (routes with
    /// `idempotency.completer = true`); also the first pause of its backoff, which
    /// doubles with each attempt.
    #[serde(with = "humantime_serde")]
    pub completer_interval: Duration,
    /// How long after its lease expired an abandoned request is left to a client's
    /// retry before the completer takes it over.
    #[serde(with = "humantime_serde")]
    pub completer_grace: Duration,
    /// Most times the completer sends one abandoned request; then it is given up
    /// (counted, logged once, shown in the admin API) and left to a client's retry.
    pub completer_attempts: u32,
    /// Most abandoned requests one completer pass takes over.
    pub completer_batch: usize,
    /// A file holding the password (instead of one in `url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    pub tls: PostgresTls,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            url: "postgres://postgres@127.0.0.1:5432/postgres".into(),
            pool_size: 8,
            migrate_on_start: true,
            lookup_on_miss: LookupOnMiss::Always,
            claims: ClaimDurability::WriteThrough,
            statement_timeout: Duration::from_secs(2),
            batch_max: 256,
            retry_queue: 10_000,
            retry_queue_bytes: ByteSize::mib(256),
            reap_interval: Duration::from_secs(60),
            reap_batch: 1000,
            completer_interval: Duration::from_secs(5),
            completer_grace: Duration::from_secs(5),
            completer_attempts: 5,
            completer_batch: 100,
            password_file: None,
            tls: PostgresTls::default(),
        }
    }
}

/// `postgres.lookup_on_miss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupOnMiss {
    /// Every acquired Redis claim is checked against Postgres before forwarding.
    Always,
    /// Skip the check while Redis provably holds everything written within the longest `ttl`.
    WhenCold,
}

/// `postgres.claims`: where a claim is held before the request is forwarded. Completed
/// responses are written through to Postgres in both modes.
///
/// The default is `write_through`: no request is forwarded twice for one key while its
/// lease is valid, whatever Redis loses (a restart without persistence, a flush, an
/// eviction, a failover that drops writes not yet replicated) or whichever replicas it is
/// cut off from. Concurrent claims share Postgres statements, as completions do
/// (`postgres.batch_max`): in the latest quiet `make bench` (BENCHMARKS.md) a first
/// execution ran at 1.02x the req/s of one with `redis` claims, which look the key up
/// in Postgres instead (rows `first-wtclaims` and `first-redisclaims`; 0.76x to 0.88x
/// in earlier runs on a busy machine). While Postgres is down, keyed requests answer 503.
///
/// `redis` keeps claims in Redis only (the old default, CHANGELOG.md): keyed requests go
/// on while Postgres is down, but a key in flight when
/// Redis loses its claim can run a second time if it is retried before the first
/// execution completes (docs/guarantees.md, "Guarantees, and the window of each mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimDurability {
    /// Claims live in Redis only; completed responses are written through.
    #[serde(rename = "redis")]
    RedisOnly,
    /// Claims are also committed to Postgres before the upstream call (the default).
    WriteThrough,
}

/// `idempotency.on_redis_unavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRedisUnavailable {
    /// Claim in Postgres instead (needs `[postgres]`).
    Postgres,
    /// Answer 503 `store_unavailable`.
    Reject,
    /// Forward without idempotency, marked `Idempotency-Status: bypassed`.
    PassThrough,
}

/// Declares each idempotency setting once (its type, serde form, default and doc) and
/// generates from that one list [`IdempotencyConfig`] with its `Default`, the
/// per-route [`IdempotencyOverrides`] (every route setting as an `Option`) and
/// [`IdempotencyOverrides::apply`], which merges a route's overrides over the
/// defaults. Settings under `global` cannot be overridden per route.
macro_rules! idempotency_settings {
    (
        route { $( $(#[$rmeta:meta])* $rname:ident : $rty:ty = $rdefault:expr; )* }
        global { $( $(#[$gmeta:meta])* $gname:ident : $gty:ty = $gdefault:expr; )* }
    ) => {
        /// `[idempotency]`: the defaults every route starts from; also a route's
        /// effective settings once its overrides are applied ([`crate::route::Policy`]).
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct IdempotencyConfig {
            $( $(#[$rmeta])* pub $rname: $rty, )*
            $( $(#[$gmeta])* pub $gname: $gty, )*
        }

        impl Default for IdempotencyConfig {
            fn default() -> Self {
                Self {
                    $( $rname: $rdefault, )*
                    $( $gname: $gdefault, )*
                }
            }
        }

        /// `[routes.idempotency]`: this route's own values of settings of `[idempotency]`
        /// ([`IdempotencyConfig`]); a setting left out takes the `[idempotency]` value.
        #[derive(Debug, Clone, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct IdempotencyOverrides {
            $(
                $(#[$rmeta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $rname: Option<$rty>,
            )*
        }

        impl IdempotencyOverrides {
            /// The route's effective settings: each override, else the default.
            pub fn apply(&self, base: &IdempotencyConfig) -> IdempotencyConfig {
                IdempotencyConfig {
                    $( $rname: self.$rname.clone().unwrap_or_else(|| base.$rname.clone()), )*
                    $( $gname: base.$gname.clone(), )*
                }
            }
        }
    };
}

idempotency_settings! {
    route {
        /// The header that carries the idempotency key.
        #[serde(with = "typed")]
        header: HeaderName = HeaderName::from_static("idempotency-key");
        /// Other headers accepted for the key, after `header`.
        #[serde(with = "typed")]
        header_aliases: Vec<HeaderName> = vec![HeaderName::from_static("x-idempotency-key")];
        /// The methods that go through the idempotency layer; others pass through.
        #[serde(with = "typed")]
        methods: Vec<Method> = vec![Method::POST, Method::PATCH];
        /// Whether a covered request without a key is refused (400).
        required: bool = false;
        /// Longest key accepted, in visible ASCII characters; a longer key is refused (400).
        max_key_length: usize = 255;
        /// How long a completed response is kept and replayed.
        #[serde(with = "humantime_serde")]
        ttl: Duration = Duration::from_secs(24 * 3600);
        /// The lease of an in-flight request (extended by its heartbeat).
        #[serde(with = "humantime_serde")]
        lock_ttl: Duration = Duration::from_secs(30);
        /// The headers whose values name the tenant (each absent, or present once). Prefer
        /// a stable tenant header set by the auth layer (`X-Tenant-Id`) over a credential
        /// that changes when it is refreshed (`Authorization`).
        #[serde(with = "typed")]
        scope_headers: Vec<HeaderName> = vec![http::header::AUTHORIZATION];
        /// A keyed request with none of `scope_headers`: refused, or put in one scope that
        /// every such caller shares (and so sees each other's stored responses).
        anonymous: AnonymousScope = AnonymousScope::Reject;
        /// Whether replays repeat the first response's `Set-Cookie` headers. When false,
        /// they are not stored at all: only the first execution's client gets them.
        replay_set_cookie: bool = false;
        /// The status of a reused key with a different request (a 4xx).
        #[serde(with = "typed")]
        mismatch_status: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;
        /// Upstream statuses that release the key instead of being stored.
        #[serde(with = "typed")]
        release_statuses: Vec<StatusCode> = vec![
            StatusCode::REQUEST_TIMEOUT,
            StatusCode::TOO_EARLY,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::BAD_GATEWAY,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::GATEWAY_TIMEOUT,
        ];
        /// What a keyed request gets while Redis is down (its breaker open) or a claim
        /// times out.
        on_redis_unavailable: OnRedisUnavailable = OnRedisUnavailable::Postgres;
        /// What a duplicate of an in-flight request gets: 409 at once, or a wait for the result.
        in_flight: InFlightPolicy = InFlightPolicy::Reject;
        /// How long a waiting duplicate waits before its 409.
        #[serde(with = "humantime_serde")]
        wait_timeout: Duration = Duration::from_secs(10);
        /// Most duplicates waiting on one key across the fleet; more get 409 at once.
        max_waiters: u32 = 100;
        /// A timeout or reset after the request may have reached the upstream.
        on_ambiguous: OnAmbiguous = OnAmbiguous::Release;
        /// Keep each request with its durable lease, so that the completer can send it
        /// again if its replica dies mid-request and the client never retries
        /// (docs/completer.md). Needs `[postgres]` with `claims = "write_through"`, and
        /// an upstream that treats the forwarded `Idempotency-Key` as its own
        /// deduplication key.
        completer: bool = false;
    }
    global {
        /// A file holding the server secret that keys scope and record ids (HMAC-SHA-256),
        /// so that hashes in logs and Postgres cannot be reversed. Global only.
        scope_secret_file: Option<std::path::PathBuf> = None;
        /// After introducing `scope_secret_file`: also look new keys up under their
        /// unkeyed (pre-secret) ids, so records stored before the upgrade replay. Turn off
        /// one `ttl` after the upgrade. Global only.
        lookup_unkeyed_ids: bool = false;
    }
}

/// `idempotency.anonymous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnonymousScope {
    /// 400 `idempotency_scope_missing`.
    Reject,
    /// One scope for every caller without the scope headers, on this route.
    Shared,
}

/// `idempotency.in_flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlightPolicy {
    /// 409 `idempotency_key_in_flight` with `Retry-After`.
    Reject,
    /// Wait up to `wait_timeout` for the holder, then replay (or 409).
    Wait,
}

/// `idempotency.on_ambiguous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnAmbiguous {
    /// Release the key: a retry runs again (the upstream deduplicates on the forwarded key).
    Release,
    /// Store a 502/504 `upstream_outcome_unknown` problem and replay it.
    Store,
}

/// `[[routes]]`: one upstream and the path prefix routed to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name, in metrics (`route` label) and logs: 1 to 64 of `A-Z`, `a-z`,
    /// `0-9`, `_`, `-`, unique.
    pub name: String,
    /// Requests whose path it covers, by whole segments, go to this route (the longest
    /// such prefix wins); starts with `/`.
    pub path_prefix: String,
    /// `http://host:port` or `https://host:port`, parsed (and checked) while the
    /// configuration is read.
    #[serde(with = "typed")]
    pub upstream: Uri,
    /// Longest the upstream may take to answer; then 504 `upstream_timeout`, and the
    /// key is released or the outcome stored (`idempotency.on_ambiguous`).
    #[serde(with = "humantime_serde", default = "default_upstream_timeout")]
    pub upstream_timeout: Duration,
    #[serde(default)]
    pub idempotency: IdempotencyOverrides,
    #[serde(default)]
    pub tls: UpstreamTls,
}

fn default_upstream_timeout() -> Duration {
    Duration::from_secs(20)
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or an environment variable did not parse into the schema.
    #[error("{0}")]
    Parse(String),
    /// A value parsed but is not acceptable.
    #[error("invalid configuration: `{key}`: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }

    fn from_figment(err: figment::Error) -> Self {
        let lines: Vec<String> = err
            .into_iter()
            .map(|e| {
                let key = if e.path.is_empty() {
                    "(top level)".to_string()
                } else {
                    key_path(&e.path)
                };
                let origin = e
                    .metadata
                    .as_ref()
                    .map(|m| format!(" (from {})", m.name))
                    .unwrap_or_default();
                format!("invalid configuration: `{key}`: {}{origin}", e.kind)
            })
            .collect();
        Self::Parse(lines.join("\n"))
    }
}

/// `["server", "trusted_proxies", "1"]` as `server.trusted_proxies[1]`, the form
/// [`validate`] uses for list entries too.
fn key_path(path: &[String]) -> String {
    let mut key = String::new();
    for part in path {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            key.push('[');
            key.push_str(part);
            key.push(']');
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(part);
        }
    }
    key
}

impl Config {
    /// Loads defaults, then `path` (if any), then `IDEMGATE__*` variables, and validates.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut layers = Figment::new();
        if let Some(path) = path {
            if !path.is_file() {
                return Err(ConfigError::Parse(format!(
                    "configuration file {} does not exist or is not a file",
                    path.display()
                )));
            }
            layers = layers.merge(Toml::file_exact(path));
        }
        Self::extract(layers.merge(Env::prefixed(ENV_PREFIX).split("__")))
    }

    /// Parses a TOML document on top of the defaults (no environment), and validates.
    pub fn from_toml(toml: &str) -> Result<Self, ConfigError> {
        Self::extract(Figment::from(Toml::string(toml)))
    }

    /// The operator's `layers` (file, environment) over the defaults, into the schema,
    /// old spellings of renamed settings first read into their new keys
    /// ([`deprecated`]); then validated.
    fn extract(layers: Figment) -> Result<Self, ConfigError> {
        let defaults = Figment::from(Serialized::defaults(Config::default()));
        let given: figment::value::Dict = layers.extract().map_err(ConfigError::from_figment)?;
        let config = if deprecated::any(&given) {
            // Rewritten only when needed: the rewritten layers lose the name of the file
            // or variable each value came from, which errors otherwise cite.
            let mut given = given;
            let found = deprecated::rewrite(&mut given)?;
            let mut config: Config = (defaults.merge(Serialized::defaults(given)))
                .extract()
                .map_err(ConfigError::from_figment)?;
            config.deprecated = found;
            config
        } else {
            (defaults.merge(layers))
                .extract()
                .map_err(ConfigError::from_figment)?
        };
        validate(&config)?;
        Ok(config)
    }

    /// The longest `ttl` of any route (and the default): how far back `when_cold` must trust Redis.
    pub fn longest_ttl(&self) -> Duration {
        (self.routes.iter())
            .map(|r| r.idempotency.apply(&self.idempotency).ttl)
            .chain([self.idempotency.ttl])
            .max()
            .unwrap_or(self.idempotency.ttl)
    }

    /// The effective configuration as TOML, with secrets (URL passwords) redacted.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        shown.redis.url = redact_url(&shown.redis.url);
        topology::redact(&mut shown.redis);
        if let Some(pg) = shown.postgres.as_mut() {
            pg.url = redact_url(&pg.url);
        }
        if shown.admin.token.is_some() {
            shown.admin.token = Some("***".into());
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// Replaces the password of `scheme://user:password@host` with `***`.
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match base.split_once("://").and_then(|(scheme, rest)| {
        let (userinfo, host) = rest.rsplit_once('@')?;
        let (user, _password) = userinfo.split_once(':')?;
        Some(format!("{scheme}://{user}:***@{host}"))
    }) {
        Some(redacted) => redacted,
        None => base.to_string(),
    };
    if let Some(query) = query {
        // Secrets may also travel as parameters (`?password=`, libpq's `sslpassword`).
        let params: Vec<String> = (query.split('&'))
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.to_ascii_lowercase().contains("password") => {
                    format!("{name}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("redis://u:secret@host:6379/0"),
            "redis://u:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=disable&password=s3cret&sslpassword=x"),
            "postgres://u@h/db?sslmode=disable&password=***&sslpassword=***"
        );
    }

    #[test]
    fn sizes_and_durations_parse_in_human_form() {
        let c = Config::from_toml(
            "[server]\nmax_request_body = \"2MiB\"\nshutdown_grace = \"250ms\"\n\
             linger_bytes = \"0B\"\nlinger_time = \"1500ms\"\n[idempotency]\nttl = \"1h\"\n",
        )
        .unwrap();
        assert_eq!(c.server.max_request_body, ByteSize::mib(2));
        assert_eq!(c.server.shutdown_grace, Duration::from_millis(250));
        assert_eq!(c.server.linger_bytes, ByteSize::b(0));
        assert_eq!(c.server.linger_time, Duration::from_millis(1500));
        assert_eq!(c.idempotency.ttl, Duration::from_secs(3600));
    }

    #[test]
    fn route_overrides_inherit_the_rest() {
        let c = Config::from_toml(
            "[[routes]]\nname = \"a\"\npath_prefix = \"/a/\"\nupstream = \"http://127.0.0.1:1\"\n\
             upstream_timeout = \"1s\"\n[routes.idempotency]\nrequired = true\nttl = \"5m\"\n",
        )
        .unwrap();
        let eff = c.routes[0].idempotency.apply(&c.idempotency);
        assert!(eff.required);
        assert_eq!(eff.ttl, Duration::from_secs(300));
        assert_eq!(eff.lock_ttl, c.idempotency.lock_ttl);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("[redis]\nurll = \"redis://x\"\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("urll"), "{text}");
    }

    #[test]
    fn bad_values_are_named() {
        let err = Config::from_toml("[server]\nshutdown_grace = \"soon\"\n").unwrap_err();
        assert!(err.to_string().contains("server.shutdown_grace"), "{err}");
        let err = Config::from_toml("[log]\nqueue_lines = 0\n").unwrap_err();
        assert!(err.to_string().contains("log.queue_lines"), "{err}");
    }

    #[test]
    fn redacted_toml_round_trips() {
        let mut c = Config::default();
        c.redis.url = "redis://u:pw@127.0.0.1:6379".into();
        let text = c.to_redacted_toml();
        assert!(!text.contains("pw@"), "{text}");
        assert!(text.contains("u:***@"), "{text}");
        let back = Config::from_toml(&text.replace("u:***@", "")).unwrap();
        assert_eq!(back.idempotency.ttl, c.idempotency.ttl);
    }
}
