//! `[redis] mode`: which Redis topology the gateway talks to, and the keys each mode
//! uses. `standalone` (the default) connects to `redis.url`; `cluster` to the seed
//! `redis.nodes` (the rest of the cluster is discovered); `sentinel` asks the sentinels
//! in `redis.sentinel.nodes` for the primary of `redis.sentinel.service_name` and
//! follows it across failovers. Claims, completions and lookups always go to primaries.
//!
//! Credentials of the data nodes: the `user:password@` of `redis.url` (standalone), of
//! the first `redis.nodes` URL (cluster) or of the first `redis.sentinel.nodes` URL
//! (sentinel, as fred reads sentinel URLs); `redis.sentinel.username` and `password`
//! are the sentinels' own, when they require any. [`check`] explains a key given for a
//! mode that does not use it, naming the key.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::url_secrets::redact_url;

/// `redis.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisMode {
    /// One Redis at `redis.url` (today's behaviour).
    #[default]
    Standalone,
    /// Redis Cluster, discovered from the seed `redis.nodes`.
    Cluster,
    /// A primary found (and followed) through `redis.sentinel`.
    Sentinel,
}

impl RedisMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standalone => "standalone",
            Self::Cluster => "cluster",
            Self::Sentinel => "sentinel",
        }
    }
}

/// `[redis.sentinel]`: the sentinels to ask for the primary (`redis.mode = "sentinel"`),
/// which the gateway follows across failovers.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SentinelConfig {
    /// The name the sentinels monitor the primary under (`sentinel monitor <name> ...`).
    pub service_name: String,
    /// `redis://host:port` of the sentinels (any number; at least one must answer).
    pub nodes: Vec<String>,
    /// ACL user of the sentinels, when they require one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password of the sentinels, when they require one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// The rules across `redis.mode`, `redis.nodes` and `redis.sentinel`.
pub fn check(
    mode: RedisMode,
    nodes: &[String],
    sentinel: &SentinelConfig,
) -> Result<(), ConfigError> {
    check_mode(mode, nodes, sentinel)?;
    let urls = nodes.iter().map(|u| ("redis.nodes", u));
    let sentinels = sentinel.nodes.iter().map(|u| ("redis.sentinel.nodes", u));
    for (key, url) in urls.chain(sentinels) {
        if !url.starts_with("redis://") && !url.starts_with("rediss://") {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "`{}` must start with redis:// or rediss://",
                    redact_url(url)
                ),
            ));
        }
    }
    Ok(())
}

/// The keys each mode needs, and those it does not use.
fn check_mode(
    mode: RedisMode,
    nodes: &[String],
    sentinel: &SentinelConfig,
) -> Result<(), ConfigError> {
    let sentinel_given = *sentinel != SentinelConfig::default();
    match mode {
        RedisMode::Standalone | RedisMode::Cluster if sentinel_given => {
            return Err(ConfigError::invalid(
                "redis.sentinel",
                format!(
                    "is only used with redis.mode = \"sentinel\" (mode is \"{}\"); set the \
                     mode or remove [redis.sentinel]",
                    mode.as_str()
                ),
            ));
        }
        RedisMode::Standalone | RedisMode::Sentinel if !nodes.is_empty() => {
            return Err(ConfigError::invalid(
                "redis.nodes",
                format!(
                    "lists cluster seed nodes, used only with redis.mode = \"cluster\" (mode \
                     is \"{}\"); {}",
                    mode.as_str(),
                    if mode == RedisMode::Standalone {
                        "set mode = \"cluster\", or use redis.url for one Redis"
                    } else {
                        "list the sentinels in redis.sentinel.nodes"
                    }
                ),
            ));
        }
        RedisMode::Cluster if nodes.is_empty() => {
            return Err(ConfigError::invalid(
                "redis.nodes",
                "mode = \"cluster\" needs at least one seed node, e.g. nodes = \
                 [\"redis://10.0.0.1:6379\"]",
            ));
        }
        RedisMode::Sentinel if sentinel.nodes.is_empty() => {
            return Err(ConfigError::invalid(
                "redis.sentinel.nodes",
                "mode = \"sentinel\" needs at least one sentinel, e.g. nodes = \
                 [\"redis://10.0.0.1:26379\"]",
            ));
        }
        RedisMode::Sentinel if sentinel.service_name.is_empty() => {
            return Err(ConfigError::invalid(
                "redis.sentinel.service_name",
                "mode = \"sentinel\" needs the name the sentinels monitor the primary under",
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Hides the passwords of the topology keys (for `check-config` output).
pub fn redact(nodes: &mut [String], sentinel: &mut SentinelConfig) {
    for url in nodes.iter_mut().chain(sentinel.nodes.iter_mut()) {
        *url = redact_url(url);
    }
    if sentinel.password.is_some() {
        sentinel.password = Some("***".into());
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn err(toml: &str) -> String {
        match Config::from_toml(toml) {
            Ok(_) => panic!("accepted: {toml}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn default_is_standalone() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.redis.mode, super::RedisMode::Standalone);
    }

    #[test]
    fn cluster_and_sentinel_parse() {
        let c = Config::from_toml(
            "[redis]\nmode = \"cluster\"\nnodes = [\"redis://10.0.0.1:6379\", \"redis://10.0.0.2:6379\"]\n",
        )
        .unwrap();
        assert_eq!(c.redis.mode, super::RedisMode::Cluster);
        assert_eq!(c.redis.nodes.len(), 2);
        let c = Config::from_toml(
            "[redis]\nmode = \"sentinel\"\n[redis.sentinel]\nservice_name = \"main\"\n\
             nodes = [\"redis://10.0.0.1:26379\"]\npassword = \"s3cret\"\n",
        )
        .unwrap();
        assert_eq!(c.redis.sentinel.service_name, "main");
        assert!(!c.to_redacted_toml().contains("s3cret"));
    }

    #[test]
    fn wrong_combinations_name_their_key() {
        for (toml, key) in [
            ("[redis]\nnodes = [\"redis://a:1\"]\n", "`redis.nodes`"),
            ("[redis]\nmode = \"cluster\"\n", "`redis.nodes`"),
            (
                "[redis]\nmode = \"cluster\"\nnodes = [\"http://a:1\"]\n",
                "`redis.nodes`",
            ),
            ("[redis]\nmode = \"sentinel\"\n", "`redis.sentinel.nodes`"),
            (
                "[redis]\nmode = \"sentinel\"\n[redis.sentinel]\nnodes = [\"redis://a:1\"]\n",
                "`redis.sentinel.service_name`",
            ),
            (
                "[redis]\n[redis.sentinel]\nservice_name = \"m\"\n",
                "`redis.sentinel`",
            ),
        ] {
            let e = err(toml);
            assert!(e.contains(key), "{toml}: {e}");
        }
        assert!(err("[redis]\nmode = \"ring\"\n").contains("redis.mode"));
    }
}
