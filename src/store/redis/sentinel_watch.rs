//! Sentinel mode: which primary a majority of the configured sentinels names now
//! ([`SentinelWatch::majority`]), asked by the probe, which makes the pool follow it
//! and keeps claims out of a primary no majority names.
//!
//! fred asks the sentinels for the primary only when it makes a connection. Across a
//! network partition that is not enough (measured in `make chaos`'s partition rows):
//! packets to the old primary vanish, its connections hang rather than fail, and a
//! replica on the majority side kept sending every claim to the old primary for the
//! whole partition (503s) instead of following the promotion the other sentinels made;
//! worse, after the heal it went on writing there until the sentinels demoted it, and
//! everything written then was lost when it resynced from the new primary. A replica
//! on the minority side kept writing to the old primary all along, which nobody else
//! reads: in Redis-only mode every response it stored there was lost.
//!
//! So the probe asks every configured sentinel itself, at once, on connections of its
//! own (one per sentinel, `redis.command_timeout` per answer). A primary named by more
//! than half of the *configured* sentinels is the primary: if the pool is connected
//! elsewhere it is reconnected, and the breaker stays open (claims follow
//! `on_redis_unavailable`) until it points there. When no majority can be reached (this
//! replica is on a minority side, or most sentinels are down), claims leave Redis too:
//! the replica cannot tell whether its primary is still the primary.

use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};
use fred::prelude::{Builder, ClientLike, Config as FredConfig, ReconnectPolicy, Value};

use crate::config::{RedisConfig, RedisMode};

/// The address a sentinel names for the service: `(ip, port)`.
pub type Named = (String, u16);

/// One client per configured sentinel, and the service to ask about.
pub struct SentinelWatch {
    sentinels: Vec<fred::prelude::Client>,
    service: String,
    timeout: Duration,
    /// How long a reconnection of the pool may take: two connect timeouts (the
    /// sentinel, then the primary).
    pub reconnect_within: Duration,
}

impl std::fmt::Debug for SentinelWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelWatch")
            .field("sentinels", &self.sentinels.len())
            .field("service", &self.service)
            .finish()
    }
}

impl SentinelWatch {
    /// `None` unless `redis.mode = "sentinel"`. Connects in the background: a sentinel
    /// that is down only counts as not naming anything.
    pub fn connect(config: &RedisConfig) -> Result<Option<Self>, FredError> {
        if config.mode != RedisMode::Sentinel {
            return Ok(None);
        }
        let mut sentinels = Vec::with_capacity(config.sentinel.nodes.len());
        for url in &config.sentinel.nodes {
            let mut fred = FredConfig::from_url_centralized(url)?;
            crate::tls::redis::apply(&mut fred, config)
                .map_err(|e| FredError::new(ErrorKind::Config, e.to_string()))?;
            // The sentinels' own credentials, not the data servers' (`password_file`).
            fred.username = config.sentinel.username.clone();
            fred.password = config.sentinel.password.clone();
            fred.fail_fast = true;
            let client = Builder::from_config(fred)
                .with_performance_config(|p| p.default_command_timeout = config.command_timeout)
                .with_connection_config(|c| {
                    c.connection_timeout = config.connect_timeout;
                    c.internal_command_timeout = config.connect_timeout;
                    c.unresponsive.max_timeout = Some(config.command_timeout * 2);
                })
                .set_policy(ReconnectPolicy::new_constant(0, 200))
                .build()?;
            client.connect();
            sentinels.push(client);
        }
        Ok(Some(Self {
            sentinels,
            service: config.sentinel.service_name.clone(),
            timeout: config.command_timeout,
            reconnect_within: config.connect_timeout * 2,
        }))
    }

    /// The primary named by more than half of the configured sentinels, asking them all
    /// at once; `None` when no address has that many (unreachable, or disagreeing).
    pub async fn majority(&self) -> Option<Named> {
        let mut asks = tokio::task::JoinSet::new();
        for client in &self.sentinels {
            let (client, service, timeout) = (client.clone(), self.service.clone(), self.timeout);
            asks.spawn(async move {
                let args = vec!["get-master-addr-by-name".to_string(), service];
                let asked = client.custom::<Value, _>(fred::cmd!("SENTINEL"), args);
                match tokio::time::timeout(timeout, asked).await {
                    Ok(Ok(value)) => named(value),
                    _ => None,
                }
            });
        }
        let mut votes: Vec<(Named, usize)> = Vec::new();
        while let Some(answer) = asks.join_next().await {
            let Ok(Some(addr)) = answer else { continue };
            match votes.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, n)) => *n += 1,
                None => votes.push((addr, 1)),
            }
        }
        let needed = self.sentinels.len() / 2 + 1;
        (votes.into_iter()).find_map(|(addr, n)| (n >= needed).then_some(addr))
    }

    /// Closes the sentinels' connections (shutdown).
    pub async fn quit(&self) {
        for client in &self.sentinels {
            let _ = client.quit().await;
        }
    }
}

/// `get-master-addr-by-name`'s reply: `[ip, port]`, or nil for an unknown service.
fn named(value: Value) -> Option<Named> {
    let Value::Array(parts) = value else {
        return None;
    };
    let [ip, port] = parts.as_slice() else {
        return None;
    };
    let ip = ip.as_string()?;
    let port = port.as_string()?.parse().ok()?;
    Some((ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_named_address() {
        let reply = Value::Array(vec![
            Value::String("10.0.0.5".into()),
            Value::String("6379".into()),
        ]);
        assert_eq!(named(reply), Some(("10.0.0.5".to_string(), 6379)));
        assert_eq!(named(Value::Null), None);
        assert_eq!(named(Value::Array(vec![Value::String("x".into())])), None);
    }
}
