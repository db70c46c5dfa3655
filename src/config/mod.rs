//! Configuration: the typed schema, its built-in defaults, and loading in layers
//! (defaults, then a TOML file, then `IDEMGATE__SECTION__KEY` environment variables).
//!
//! Loading never yields a half-valid value: [`Config::load`] deserialises straight
//! into the types the gateway uses (`http::Method`, `HeaderName`, `StatusCode`, the
//! upstream `Uri`, durations, sizes, CIDRs, key material), with unknown keys rejected,
//! and then runs [`validate`](validate::validate) for the rules across keys, so every
//! error names the key it is about. Renamed settings are still read under their old
//! spelling, with a warning ([`deprecated`]). [`crate::App::build`] validates again, so
//! a `Config` built or changed in code cannot start unchecked.
//!
//! One file per section, with its defaults and its rules: [`server`] (`[server]`,
//! `[admin]`, `[log]`), [`redis`] (`[redis]`, `[replay_cache]`, with [`topology`] and
//! [`replication`]), [`postgres`], [`idempotency`], [`routes`], [`encryption`] (read by
//! [`keys`]), [`tls`], [`runtime`] and [`tracing`]; [`load`] reads them, [`validate()`] runs their rules
//! and those across sections, [`redacted`] shows them without secrets; [`status_set`] and
//! [`header_pattern`] are the status and header lists of [`idempotency`] (codes and
//! classes, names and prefixes). The module uses nothing else of the crate: the rest of
//! the gateway depends on it, not the reverse.

mod admin_token;
mod cidr;
mod conninfo;
mod deprecated;
mod encryption;
mod error;
mod fingerprint;
mod grpc;
mod header_pattern;
mod idempotency;
mod key_from;
mod keys;
mod load;
mod pointer;
mod policies;
mod postgres;
mod redacted;
mod redis;
mod replication;
mod routes;
mod runtime;
mod server;
mod share;
mod status_set;
mod tls;
mod topology;
mod tracing;
mod typed;
mod url_secrets;
mod validate;
mod warnings;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use admin_token::{admin_token, token_matches};
pub use cidr::{Cidr, TrustedProxies};
pub use deprecated::Deprecation;
pub use encryption::REPLAY_UNSEALED_DEFAULT;
pub use error::ConfigError;
pub use fingerprint::{BodyMode, FingerprintPolicy, QueryMode};
pub use grpc::GrpcCode;
pub use header_pattern::{HeaderPattern, ReplayOmit};
pub use idempotency::{
    AnonymousScope, ExpiresHeader, IdempotencyConfig, IdempotencyOverrides, InFlightPolicy,
    OnAmbiguous, OnRedisUnavailable, Streaming,
};
pub use key_from::KeyFrom;
pub use keys::{EncryptionKeys, KeyMaterial, KeyringError, KEY_LEN, MAX_ID_LEN};
pub use load::ENV_PREFIX;
pub use pointer::{JsonPointer, PointerError, Segment};
pub use postgres::{ClaimDurability, LookupOnMiss, PostgresConfig, RedisFill};
pub use redis::{RecordFormat, RedisConfig, ReplayCacheConfig};
pub use routes::{RouteConfig, UpstreamProtocol};
pub use runtime::{worker_share, Runtime, Workers};
pub use server::{AdminConfig, LogConfig, LogFormat, ServerConfig};
pub use share::Share;
pub use status_set::{StatusEntry, StatusSet};
pub use tls::{
    read_secret, ListenerTls, PostgresTls, RedisTls, ResolvedPgTls, SslMode, UpstreamTls,
};
pub use topology::{RedisMode, SentinelConfig};
pub use tracing::{OtlpProtocol, TracingConfig};
pub use url_secrets::redact_url;
pub use validate::validate;
pub use warnings::{warnings, Warning};

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
    pub encryption: Option<EncryptionKeys>,
    /// `[tracing]`: spans exported over OTLP (off unless an endpoint is set).
    pub tracing: TracingConfig,
    /// Deprecated spellings this configuration used, each read into its new setting
    /// (warned about at start and by `check-config`); not a setting.
    #[serde(skip)]
    pub deprecated: Vec<Deprecation>,
}

impl Config {
    /// The longest `ttl` of any route (and the default): how far back `when_cold` must trust Redis.
    /// Whether claims are vouched (`postgres.claims = "vouched"`).
    pub fn vouched_claims(&self) -> bool {
        (self.postgres.as_ref()).is_some_and(|p| p.claims == ClaimDurability::Vouched)
    }

    /// With `[postgres]`, how long a slot whose Redis lost its data is not trusted alone
    /// (once a claim may have been kept by Redis alone: a replica with `claims =
    /// "vouched"` ran): the longest `lock_ttl` and the command timeout, so that every
    /// holder's heartbeat (every third of it, timed from the end of the one before) has
    /// come twice, the first one failing after its command timeout, and written its lease
    /// back. `None` with Redis alone.
    pub fn epoch_quarantine(&self) -> Option<Duration> {
        self.postgres.as_ref()?;
        let longest = (self.routes.iter())
            .map(|r| r.idempotency.apply(&self.idempotency).lock_ttl)
            .chain([self.idempotency.lock_ttl])
            .max()
            .unwrap_or(self.idempotency.lock_ttl);
        Some(longest + self.redis.command_timeout)
    }

    pub fn longest_ttl(&self) -> Duration {
        (self.routes.iter())
            .map(|r| r.idempotency.apply(&self.idempotency).ttl)
            .chain([self.idempotency.ttl])
            .max()
            .unwrap_or(self.idempotency.ttl)
    }
}
