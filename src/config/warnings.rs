//! Configuration warnings: settings that are valid but leave the gateway idle or weaken
//! a guarantee, computed from the configuration alone (no I/O). Start-up logs each
//! (`App::build`) and `idemgate check-config` prints them. Warnings that need a live
//! connection (Redis's eviction policy, a cluster that requires full coverage) are
//! logged at start-up only, once connected.

use std::fmt;

use tokio_postgres::config::TargetSessionAttrs;

use super::{ClaimDurability, Config, OnRedisUnavailable, PostgresConfig};

/// A setting that is valid but probably not what a deployment wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warning {
    /// No `[[routes]]`: every proxied request answers 404.
    NoRoutes,
    /// No `idempotency.scope_secret_file`: scope and record ids are unkeyed SHA-256.
    NoScopeSecret,
    /// No `[postgres]`: redis-only mode.
    RedisOnly,
    /// `idempotency.on_redis_unavailable = "postgres"` without `[postgres]`.
    FallbackWithoutPostgres,
    /// `postgres.claims = "redis"`: claims are held in Redis only.
    ClaimsInRedisOnly,
    /// `postgres.url` names several hosts without `target_session_attrs=read-write`:
    /// a connection may land on a standby, or on an old primary after a failover.
    MultiHostWithoutReadWrite,
}

/// The warnings `config` deserves, in the order start-up logs them.
pub fn warnings(config: &Config) -> Vec<Warning> {
    let mut found = Vec::new();
    if config.routes.is_empty() {
        found.push(Warning::NoRoutes);
    }
    if config.idempotency.scope_secret_file.is_none() {
        found.push(Warning::NoScopeSecret);
    }
    match &config.postgres {
        None => {
            found.push(Warning::RedisOnly);
            if config.idempotency.on_redis_unavailable == OnRedisUnavailable::Postgres {
                found.push(Warning::FallbackWithoutPostgres);
            }
        }
        Some(pg) => {
            if pg.claims == ClaimDurability::RedisOnly {
                found.push(Warning::ClaimsInRedisOnly);
            }
            if multi_host_any_server(pg) {
                found.push(Warning::MultiHostWithoutReadWrite);
            }
        }
    }
    found
}

/// Whether `pg.url` lists several hosts and lets a session land on any of them.
/// (Whether the servers replicate synchronously is set on the servers: no configuration
/// here can tell.)
fn multi_host_any_server(pg: &PostgresConfig) -> bool {
    let Ok(resolved) = pg.tls.resolve(&pg.url) else {
        return false;
    };
    resolved
        .url
        .parse::<tokio_postgres::Config>()
        .is_ok_and(|c| {
            c.get_hosts().len() > 1 && c.get_target_session_attrs() != TargetSessionAttrs::ReadWrite
        })
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Warning::NoRoutes => "no [[routes]] configured: every proxied request answers 404",
            Warning::NoScopeSecret => {
                "no idempotency.scope_secret_file: scope and record ids are unkeyed SHA-256, \
                so a scope_hash in logs or Postgres can be brute-forced back to a short tenant \
                credential; set a secret (see docs/security.md)"
            }
            Warning::RedisOnly => {
                "no [postgres] configured: redis-only mode; stored responses \
                are lost if redis loses its data, and across a failover or a network \
                partition a key can run twice and an acknowledged response can be lost \
                (docs/guarantees.md: the measured windows)"
            }
            Warning::FallbackWithoutPostgres => {
                "on_redis_unavailable = \"postgres\" without [postgres]: \
                keyed requests answer 503 while redis is down"
            }
            Warning::ClaimsInRedisOnly => {
                "postgres.claims = \"redis\": when replicas disagree about redis (a \
                failover, a network partition) a key can run twice and its clients can \
                get two different responses (docs/guarantees.md: the measured windows); \
                claims = \"write_through\" (or \"vouched\", the default) has no such window; a Postgres \
                failover does not help either, since Postgres does not hold the claims"
            }
            Warning::MultiHostWithoutReadWrite => {
                "postgres.url lists several hosts without target_session_attrs=read-write: \
                the gateway may connect to a standby (every write refused) or, after a \
                failover, keep writing to a server that is no longer the primary; add \
                target_session_attrs=read-write. Whether the servers replicate synchronously \
                cannot be checked from here: without it a failover can lose committed claims \
                and responses, and a key can run twice (docs/operations.md)"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_alone_decides_its_warnings() {
        let mut config = Config::default();
        let defaults = [
            Warning::NoRoutes,
            Warning::NoScopeSecret,
            Warning::RedisOnly,
            Warning::FallbackWithoutPostgres,
        ];
        assert_eq!(warnings(&config), defaults);
        config.idempotency.on_redis_unavailable = OnRedisUnavailable::Reject;
        assert_eq!(warnings(&config), defaults[..3]);
    }

    #[test]
    fn several_hosts_need_read_write_sessions() {
        let with = |url: &str| {
            let config = Config {
                postgres: Some(PostgresConfig {
                    url: url.into(),
                    ..PostgresConfig::default()
                }),
                ..Config::default()
            };
            warnings(&config).contains(&Warning::MultiHostWithoutReadWrite)
        };
        assert!(with("postgres://u@a:1,b:2/db"));
        assert!(with("host=a,b port=1,2 dbname=db sslmode=disable"));
        assert!(!with(
            "postgres://u@a:1,b:2/db?target_session_attrs=read-write"
        ));
        assert!(!with("host=a,b port=1,2 target_session_attrs=read-write"));
        assert!(!with("postgres://u@a:1/db"), "one host: nothing to choose");
    }
}
