//! `[postgres]`, the durable tier: its settings, where claims are held
//! ([`ClaimDurability`]), when Redis claims are checked against it
//! ([`LookupOnMiss`]), when Redis gets its copy of a record ([`RedisFill`]), and its
//! rules.

use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::error::{positive_duration, ConfigError};
use super::tls::PostgresTls;
use super::url_secrets::url_password;

/// `[postgres]`: the durable tier.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// `postgres://user:password@host:port/dbname`, or the same as libpq key=value pairs
    /// (`host=a,b port=5432,5432 dbname=idemgate user=u target_session_attrs=read-write`,
    /// the form many managed services print); libpq's TLS parameters (`sslmode`...) may be
    /// given here or in `[postgres.tls]`. Several hosts are tried in order; with
    /// `target_session_attrs=read-write` only a writable one (the primary) is kept, and
    /// after a failover new connections find the new primary (a connection whose server
    /// turned read-only or is shutting down is dropped, not reused). A password here is
    /// hidden in `check-config`, logs and `Debug` output. Every session starts with
    /// `plan_cache_mode = force_generic_plan` (each statement planned once per session)
    /// and `statement_timeout`; the URL's own `options` (`options=-c
    /// plan_cache_mode=auto`) may set the first otherwise, not the second.
    pub url: String,
    /// Connections to Postgres (per process; divided among the workers of
    /// `thread_per_core`).
    pub pool_size: usize,
    /// Apply `migrations/` at `serve` start.
    pub migrate_on_start: bool,
    /// When a Redis claim is acquired, whether to look the key up in Postgres first:
    /// `when_cold` (the default) only while Redis may lack a record, or `always`.
    pub lookup_on_miss: LookupOnMiss,
    /// Where claims are held: `vouched` (the default) in Redis alone where Redis keeps
    /// them durable and in Postgres too elsewhere; `write_through` always in Postgres
    /// too; `redis` in Redis only (see [`ClaimDurability`]).
    pub claims: ClaimDurability,
    /// When Redis gets its copy of a completed record: `on_replay` or `at_completion`
    /// (see [`RedisFill`]). Unset, it follows `claims`: `on_replay` with vouched claims
    /// (the default), `at_completion` with the others.
    pub redis_fill: Option<RedisFill>,
    /// Deadline of one Postgres statement (claim, lookup, a write-through batch).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// How long one connection attempt may take on each host of `url`: the TCP
    /// connect, TLS, start-up and authentication, and the `target_session_attrs`
    /// check, as libpq's `connect_timeout` (which, given in `url`, wins over this). It is
    /// per host: a host that drops packets (powered off, partitioned) is given up after
    /// it and the next host is tried, at start-up and on every reconnect, and a host
    /// that failed is tried after the others until it answers again. A new connection
    /// waits at most this times the number of hosts.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
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
            lookup_on_miss: LookupOnMiss::WhenCold,
            claims: ClaimDurability::Vouched,
            redis_fill: None,
            statement_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
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
    /// Every acquired Redis claim is checked against Postgres before forwarding (the
    /// default before 0.6.0).
    Always,
    /// Skip the check while Redis provably holds everything written within the longest
    /// `ttl` (the default).
    WhenCold,
}

/// `postgres.claims`: where a claim is held before the request is forwarded. Completed
/// responses are written through to Postgres in both modes.
///
/// The default is `vouched` (since 0.6.0; `write_through` before): a claim is kept by
/// Redis alone where Redis keeps it durable (AOF `always`, a replica's `WAIT`), as read
/// from each primary at connect time and by every probe, and committed to Postgres
/// otherwise, for that request: no Postgres row per first execution on a Redis run as
/// the mode expects (docs/operations.md, "Redis tier"), the `write_through` guarantees
/// where it is not. While Redis cannot be reached, a key Postgres does not know answers
/// 503 (Postgres does not know the leases Redis kept).
///
/// `write_through` commits every claim to Postgres: no request is forwarded twice for
/// one key while its lease is valid, whatever Redis loses (a restart without
/// persistence, a flush, an eviction, a failover that drops writes not yet replicated)
/// or whichever replicas it is cut off from, and claims move to Postgres while Redis is
/// down. It costs a first execution one more Postgres round trip and a Postgres row per
/// claim, though concurrent claims share Postgres statements, as completions do
/// (`postgres.batch_max`). While Postgres is down, keyed requests answer 503.
///
/// `redis` keeps claims in Redis only (the old default, CHANGELOG.md): keyed requests go
/// on while Postgres is down, but a key in flight when Redis loses its claim can run a
/// second time if it is retried before the first execution completes
/// (docs/guarantees.md, "Guarantees, and the window of each mode"). Choose it only when
/// serving through a Postgres outage matters more than that window.
///
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimDurability {
    /// Claims live in Redis only; completed responses are written through.
    #[serde(rename = "redis")]
    RedisOnly,
    /// Claims are also committed to Postgres before the upstream call (the default
    /// before 0.6.0).
    WriteThrough,
    /// Claims live in Redis where Redis vouches for them: its primary fsyncs every write
    /// before it answers (`appendonly yes`, `appendfsync always`) and, where it has
    /// replicas, one acknowledged the claim (`WAIT 1`). Elsewhere, and for that request
    /// only, the claim is committed to Postgres as with `write_through`. A slot whose
    /// Redis lost its data waits out the leases it may have held (docs/guarantees.md,
    /// "Claims Redis vouches for"). Replicas of the other modes honour that too, so a
    /// fleet may switch replica by replica once every replica runs a release that reads
    /// the epoch markers. The default.
    Vouched,
}
/// `postgres.redis_fill`: when Redis gets its copy of a completed record, with
/// `claims = "write_through"` or `"vouched"` (a completed record is decided in Postgres,
/// first writer wins, so Redis' copy only spares Postgres a read). Unset, it follows
/// `claims`: `on_replay` with vouched claims (the default), `at_completion` with the
/// others.
///
/// `at_completion`: the completion stores the record in Redis too, so a retry on any
/// replica replays from Redis, and waiting duplicates are woken at once.
///
/// `on_replay`: the completion writes Postgres only, and Redis gets the record from the
/// first retry that needs it (which replays from Postgres and re-warms Redis): a first
/// execution runs one Redis script (its claim) instead of two, and Redis holds only the
/// records that were retried, not every record for its whole `ttl`. What it costs
/// (docs/guarantees.md, "Redis filled on replay"): a retry that comes while the
/// holder's lease still stands in Redis reads Postgres, so does each re-check of a
/// waiting duplicate, a duplicate waiting on another replica hears of the completion
/// at its next re-check (within a second) instead of at once, and while Postgres is
/// down only records already in Redis replay. A live (streamed) answer is completed in
/// Redis as before. Replicas of this release share a fleet on either setting: each
/// confirms a Redis "in flight" in Postgres (a Postgres read per duplicate that meets a
/// key in flight, whatever its own setting), and with vouched claims each asks Postgres
/// about a lease that ran out before it takes it over. A
/// replica of 0.5.0 with `claims = "vouched"` takes such a lease over without asking:
/// a fleet upgrading from one sets `at_completion` until every replica runs this release
/// (CHANGELOG.md). Needs `claims = "write_through"` or `"vouched"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisFill {
    /// The completion stores the record in Redis and Postgres.
    AtCompletion,
    /// The completion stores the record in Postgres; the first retry re-warms Redis.
    OnReplay,
}

impl PostgresConfig {
    /// `redis_fill` as set, else the default of `claims`: `on_replay` with vouched
    /// claims (a first execution's one Redis write is its claim), `at_completion` with
    /// the others (`redis` needs it; `write_through` keeps what it did before 0.6.0).
    pub fn redis_fill(&self) -> RedisFill {
        self.redis_fill.unwrap_or(match self.claims {
            ClaimDurability::Vouched => RedisFill::OnReplay,
            ClaimDurability::WriteThrough | ClaimDurability::RedisOnly => RedisFill::AtCompletion,
        })
    }

    /// The rules of `[postgres]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        self.check_connection()?;
        if self.redis_fill == Some(RedisFill::OnReplay) && self.claims == ClaimDurability::RedisOnly
        {
            return Err(ConfigError::invalid(
                "postgres.redis_fill",
                "\"on_replay\" needs postgres.claims = \"write_through\" or \"vouched\": with \
                 claims = \"redis\", Redis decides which answer is kept and must keep it",
            ));
        }
        if !(1..=256).contains(&self.pool_size) {
            return Err(ConfigError::invalid(
                "postgres.pool_size",
                "must be between 1 and 256",
            ));
        }
        positive_duration("postgres.statement_timeout", self.statement_timeout)?;
        positive_duration("postgres.connect_timeout", self.connect_timeout)?;
        positive_duration("postgres.reap_interval", self.reap_interval)?;
        if !(1..=10_000).contains(&self.batch_max) {
            return Err(ConfigError::invalid(
                "postgres.batch_max",
                "must be between 1 and 10000",
            ));
        }
        if self.retry_queue == 0 {
            return Err(ConfigError::invalid(
                "postgres.retry_queue",
                "must be greater than zero",
            ));
        }
        if self.reap_batch == 0 {
            return Err(ConfigError::invalid(
                "postgres.reap_batch",
                "must be greater than zero",
            ));
        }
        positive_duration("postgres.completer_interval", self.completer_interval)?;
        if self.completer_attempts == 0 || self.completer_batch == 0 {
            let key = match self.completer_attempts {
                0 => "postgres.completer_attempts",
                _ => "postgres.completer_batch",
            };
            return Err(ConfigError::invalid(key, "must be greater than zero"));
        }
        Ok(())
    }

    /// `postgres.url`, with the TLS parameters of `[postgres.tls]`, and its password.
    fn check_connection(&self) -> Result<(), ConfigError> {
        let resolved = self.tls.resolve(&self.url)?;
        if self.password_file.is_some() && url_password(&resolved.url) {
            return Err(ConfigError::invalid(
                "postgres.password_file",
                "postgres.url carries a password too: set it in one place",
            ));
        }
        if resolved.url.parse::<tokio_postgres::Config>().is_err() {
            return Err(ConfigError::invalid(
                "postgres.url",
                "is not a valid connection string (a postgres:// URL or libpq key=value pairs)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ClaimDurability, Config, LookupOnMiss, RedisFill};

    const ROUTE: &str =
        "[[routes]]\nname = \"p\"\npath_prefix = \"/\"\nupstream = \"http://127.0.0.1:1\"\n";

    fn postgres(lines: &str) -> Result<Config, String> {
        let toml = format!("[postgres]\nurl = \"postgres://localhost/x\"\n{lines}\n{ROUTE}");
        Config::from_toml(&toml).map_err(|e| e.to_string())
    }

    #[test]
    fn redis_is_filled_on_replay_with_vouched_claims_and_at_completion_with_the_others() {
        let fill = |lines: &str| postgres(lines).unwrap().postgres.unwrap().redis_fill();
        assert_eq!(fill(""), RedisFill::OnReplay, "vouched claims, the default");
        assert_eq!(fill("claims = \"write_through\""), RedisFill::AtCompletion);
        assert_eq!(fill("claims = \"redis\""), RedisFill::AtCompletion);
        // Spelled out, either setting wins over the default of its claims.
        assert_eq!(
            fill("redis_fill = \"at_completion\""),
            RedisFill::AtCompletion
        );
        let wt = "claims = \"write_through\"\nredis_fill = \"on_replay\"";
        assert_eq!(fill(wt), RedisFill::OnReplay);
    }

    #[test]
    fn claims_are_vouched_and_looked_up_when_cold_unless_asked() {
        let c = postgres("").unwrap().postgres.unwrap();
        assert_eq!(
            (c.claims, c.lookup_on_miss),
            (ClaimDurability::Vouched, LookupOnMiss::WhenCold)
        );
        // The previous defaults, spelled out, as an operator keeps them.
        let c = postgres("claims = \"write_through\"\nlookup_on_miss = \"always\"").unwrap();
        let c = c.postgres.unwrap();
        assert_eq!(
            (c.claims, c.lookup_on_miss),
            (ClaimDurability::WriteThrough, LookupOnMiss::Always)
        );
        // Filled on replay: with write-through claims and with the default, vouched ones.
        let c = postgres("redis_fill = \"on_replay\"")
            .unwrap()
            .postgres
            .unwrap();
        assert_eq!(
            (c.claims, c.redis_fill()),
            (ClaimDurability::Vouched, RedisFill::OnReplay)
        );
    }

    #[test]
    fn the_completer_needs_claims_postgres_keeps() {
        let with = |claims: &str| {
            let toml = format!(
                "[idempotency]\ncompleter = true\n[postgres]\nurl = \"postgres://localhost/x\"\n\
                 claims = \"{claims}\"\n{ROUTE}"
            );
            Config::from_toml(&toml).map_err(|e| e.to_string())
        };
        assert!(with("write_through").is_ok());
        assert!(
            with("vouched").is_ok(),
            "its routes' claims are written through"
        );
        let e = with("redis").unwrap_err();
        assert!(e.contains("idempotency.completer"), "{e}");
    }

    #[test]
    fn claims_in_redis_cannot_be_filled_on_replay() {
        let e = postgres("claims = \"redis\"\nredis_fill = \"on_replay\"").unwrap_err();
        assert!(e.contains("postgres.redis_fill"), "{e}");
        assert!(postgres("redis_fill = \"sometimes\"")
            .unwrap_err()
            .contains("redis_fill"));
    }
}
