//! Configuration warnings: settings that are valid but leave the gateway idle or weaken
//! a guarantee, computed from the configuration alone (no I/O). Start-up logs each
//! (`App::build`) and `idemgate check-config` prints them. Warnings that need a live
//! connection (Redis's eviction policy, a cluster that requires full coverage) are
//! logged at start-up only, once connected.

use std::fmt;

use super::{ClaimDurability, Config, OnRedisUnavailable};

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
        }
    }
    found
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
                the default claims = \"write_through\" has no such window"
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
}
