//! The configuration shown without its secrets: `Debug` for the sections that hold
//! secrets (`[redis]`, its `[redis.sentinel]`, `[postgres]`, `[admin]`), where URL
//! passwords are shown as `***` (via [`redact_url`]) and the admin token and the
//! sentinel password as `Some("***")`, so a `{:?}` in a log line or a panic message
//! never carries them; and the effective configuration as TOML
//! ([`Config::to_redacted_toml`], what `check-config` prints), secrets hidden too.
//!
//! Each impl destructures its struct without `..`: a field added later fails to compile
//! here until someone decides whether it is secret.

use std::fmt;

use super::postgres::PostgresConfig;
use super::redis::RedisConfig;
use super::server::AdminConfig;
use super::topology::{self, SentinelConfig};
use super::url_secrets::redact_url;
use super::Config;

/// `Some("***")` for a present secret, `None` otherwise.
fn hidden(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| "***")
}

fn redacted_urls(urls: &[String]) -> Vec<String> {
    urls.iter().map(|u| redact_url(u)).collect()
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let RedisConfig {
            mode,
            url,
            nodes,
            sentinel,
            key_prefix,
            command_timeout,
            connect_timeout,
            pool_size,
            probe_interval,
            replica_acks,
            replica_ack_timeout,
            password_file,
            tls,
            record_format,
        } = self;
        f.debug_struct("RedisConfig")
            .field("mode", mode)
            .field("url", &redact_url(url))
            .field("nodes", &redacted_urls(nodes))
            .field("sentinel", sentinel)
            .field("key_prefix", key_prefix)
            .field("command_timeout", command_timeout)
            .field("connect_timeout", connect_timeout)
            .field("pool_size", pool_size)
            .field("probe_interval", probe_interval)
            .field("replica_acks", replica_acks)
            .field("replica_ack_timeout", replica_ack_timeout)
            .field("password_file", password_file)
            .field("tls", tls)
            .field("record_format", record_format)
            .finish()
    }
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let SentinelConfig {
            service_name,
            nodes,
            username,
            password,
        } = self;
        f.debug_struct("SentinelConfig")
            .field("service_name", service_name)
            .field("nodes", &redacted_urls(nodes))
            .field("username", username)
            .field("password", &hidden(password))
            .finish()
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PostgresConfig {
            url,
            pool_size,
            migrate_on_start,
            lookup_on_miss,
            claims,
            redis_fill,
            statement_timeout,
            connect_timeout,
            batch_max,
            retry_queue,
            retry_queue_bytes,
            reap_interval,
            reap_batch,
            completer_interval,
            completer_grace,
            completer_attempts,
            completer_batch,
            password_file,
            tls,
        } = self;
        f.debug_struct("PostgresConfig")
            .field("url", &redact_url(url))
            .field("pool_size", pool_size)
            .field("migrate_on_start", migrate_on_start)
            .field("lookup_on_miss", lookup_on_miss)
            .field("claims", claims)
            .field("redis_fill", redis_fill)
            .field("statement_timeout", statement_timeout)
            .field("connect_timeout", connect_timeout)
            .field("batch_max", batch_max)
            .field("retry_queue", retry_queue)
            .field("retry_queue_bytes", retry_queue_bytes)
            .field("reap_interval", reap_interval)
            .field("reap_batch", reap_batch)
            .field("completer_interval", completer_interval)
            .field("completer_grace", completer_grace)
            .field("completer_attempts", completer_attempts)
            .field("completer_batch", completer_batch)
            .field("password_file", password_file)
            .field("tls", tls)
            .finish()
    }
}

impl fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let AdminConfig { token, token_file } = self;
        f.debug_struct("AdminConfig")
            .field("token", &hidden(token))
            .field("token_file", token_file)
            .finish()
    }
}

impl Config {
    /// The effective configuration as TOML, with secrets (URL passwords) redacted.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        shown.redis.url = redact_url(&shown.redis.url);
        topology::redact(&mut shown.redis.nodes, &mut shown.redis.sentinel);
        if let Some(pg) = shown.postgres.as_mut() {
            pg.url = redact_url(&pg.url);
            // The effective value, where it follows `claims`.
            pg.redis_fill = Some(pg.redis_fill());
        }
        if shown.admin.token.is_some() {
            shown.admin.token = Some("***".into());
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}
#[cfg(test)]
mod tests {
    use crate::config::{Config, PostgresConfig};

    #[test]
    fn debug_of_the_config_shows_no_password_or_token() {
        let mut c = Config::default();
        c.admin.token = Some("tok-SECRET-1".into());
        c.redis.url = "rediss://gw:redis-SECRET-2@h:6380".into();
        c.redis.nodes = vec!["redis://u:node-SECRET-3@n1:7000".into()];
        c.redis.sentinel.nodes = vec!["redis://:sent-SECRET-4@s1:26379".into()];
        c.redis.sentinel.password = Some("sentpw-SECRET-5".into());
        c.postgres = Some(PostgresConfig {
            url: "postgres://u:pg-SECRET-6@h/db?sslpassword=ssl-SECRET-7".into(),
            ..PostgresConfig::default()
        });
        let shown = format!("{c:?} {:#?}", c.redis);
        assert!(!shown.contains("SECRET"), "{shown}");
        for kept in [
            "rediss://gw:***@h:6380",
            "redis://u:***@n1:7000",
            "redis://:***@s1:26379",
            "postgres://u:***@h/db?sslpassword=***",
            "token: Some(\"***\")",
            "pool_size",
        ] {
            assert!(shown.contains(kept), "{kept} in {shown}");
        }
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
