//! The fred client configuration for `[redis]`: which servers to talk to in each
//! [`RedisMode`] (one URL, cluster seed nodes, or sentinels). Used by the pool
//! ([`super::RedisStore::connect`]) and the waiters' subscriber, so both follow the
//! same topology. Timeouts and the reconnect policy stay with the callers.
//!
//! fred sends every command to a primary: it routes a cluster command by the slot of
//! its first key (following `MOVED`/`ASK`), and in sentinel mode connects to the
//! primary the sentinels name, re-asking them when the connection drops. Replicas
//! are never read (fred's `replicas` feature is off).
//!
//! How a command travels in fred 10: the caller's task encodes nothing; it queues the
//! command on the client's channel and awaits a oneshot. The client's one router task
//! takes it, encodes it and writes it to the socket, and reads the replies of every
//! command in flight on that connection. fred flushes after every `EVALSHA` (its
//! `should_flush`), so each script call is one `writev` whatever the load; fewer
//! connections still let Redis read several calls and write several replies per
//! syscall (docs/history/benchmarks.md, "What changed and what it bought").

use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};
use fred::prelude::{Builder, Config as FredConfig, Pool, ReconnectPolicy, Server, ServerConfig};
use fred::types::config::ClusterDiscoveryPolicy;

use crate::config::{RedisConfig, RedisMode};

/// Most `MOVED`/`ASK` redirections one command follows (fred's default).
const MAX_REDIRECTIONS: u32 = 5;
/// Write attempts of one command besides its redirections: re-sends after its
/// connection closed with the command in flight (fred's default budget).
const RECONNECT_ATTEMPTS: u32 = 3;

/// The fred configuration of `config` (`fail_fast` off: calls wait for a connection
/// up to their own timeout rather than failing at once while reconnecting).
pub fn fred_config(config: &RedisConfig) -> Result<FredConfig, FredError> {
    let mut fred = match config.mode {
        RedisMode::Standalone => FredConfig::from_url(&config.url)?,
        RedisMode::Cluster => {
            let (mut fred, hosts) = from_nodes(&config.nodes)?;
            fred.server = ServerConfig::Clustered {
                hosts,
                policy: ClusterDiscoveryPolicy::default(),
            };
            fred
        }
        RedisMode::Sentinel => {
            let (mut fred, hosts) = from_nodes(&config.sentinel.nodes)?;
            fred.server = ServerConfig::Sentinel {
                hosts,
                service_name: config.sentinel.service_name.clone(),
                username: config.sentinel.username.clone(),
                password: config.sentinel.password.clone(),
            };
            fred
        }
    };
    crate::tls::redis::apply(&mut fred, config)?;
    fred.fail_fast = false;
    Ok(fred)
}

/// Whether fred may send a command again: after a `MOVED`/`ASK`, or on a new
/// connection when the one it was in flight on closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resends {
    /// The main pool: a claim or a read re-sent elsewhere is the same command.
    Allowed,
    /// The `WAIT` connections ([`super::replicas`]): `WAIT` counts the acknowledgements
    /// of the writes of *its* connection, so a `WAIT` re-sent on a new connection, or
    /// sent to another node than the write before it, has nothing to wait for and
    /// answers at once with every replica: a false acknowledgement. Each command is
    /// written once, to the node fred's map names; anything else fails it.
    Never,
}

/// A pool of `size` clients for `config`, not yet connected: the command timeout, the
/// connection timeouts, the unresponsive-connection check and the reconnect policy of
/// every pool the store keeps (the main one, and the `WAIT` connections of
/// [`super::replicas`]).
pub fn build_pool(config: &RedisConfig, size: usize, resends: Resends) -> Result<Pool, FredError> {
    Builder::from_config(fred_config(config)?)
        .with_performance_config(|p| p.default_command_timeout = config.command_timeout)
        .with_connection_config(|c| {
            // Calls are small writes pipelined on few connections: with Nagle's algorithm
            // a write waits for the ACK of the one before it (40-200 ms p99 stalls
            // measured on one connection). fred leaves the OS default (Nagle on).
            c.tcp.nodelay = Some(true);
            c.connection_timeout = config.connect_timeout;
            c.internal_command_timeout = config.connect_timeout;
            // A connection that stops answering (a paused or wedged Redis) is dropped
            // and re-made instead of queueing behind it.
            c.unresponsive.max_timeout = Some(config.command_timeout * 2);
            c.unresponsive.interval = (config.command_timeout / 2).max(Duration::from_millis(50));
            // fred spends one write attempt on every re-send after a `MOVED` or `ASK`: with
            // its defaults (3 attempts, 5 redirections) a claim redirected three times in a
            // row while slots move failed with "Too many failed write attempts", which
            // cannot tell redirections from re-sends over a dropped connection. With the
            // attempts above the redirections, a command redirected until fred gives up
            // fails with "Too many redirections": it ran nowhere, and the claim path
            // sends it again once the slot has moved (`claim::slot_migrating`).
            (c.max_redirections, c.max_command_attempts) = match resends {
                Resends::Allowed => (MAX_REDIRECTIONS, MAX_REDIRECTIONS + RECONNECT_ATTEMPTS),
                // fred still re-reads the slot map after a `MOVED` before failing the
                // command: the next one goes to the new owner.
                Resends::Never => (0, 1),
            };
        })
        .set_policy(ReconnectPolicy::new_constant(0, 100))
        .build_pool(size)
}

/// The host and port of every `redis://` URL in `urls`, and a configuration with the
/// credentials of the first.
fn from_nodes(urls: &[String]) -> Result<(FredConfig, Vec<Server>), FredError> {
    let mut first = None;
    let mut hosts = Vec::with_capacity(urls.len());
    for url in urls {
        let parsed = FredConfig::from_url_centralized(url)?;
        match &parsed.server {
            ServerConfig::Centralized { server } => hosts.push(server.clone()),
            _ => {
                return Err(FredError::new(
                    ErrorKind::Config,
                    "not a redis://host:port URL",
                ))
            }
        }
        first.get_or_insert(parsed);
    }
    let first = first.ok_or_else(|| FredError::new(ErrorKind::Config, "no nodes"))?;
    let fred = FredConfig {
        username: first.username,
        password: first.password,
        ..FredConfig::default()
    };
    Ok((fred, hosts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::prelude::ClientLike as _;

    fn redis(toml: &str) -> RedisConfig {
        crate::config::Config::from_toml(toml).unwrap().redis
    }

    #[test]
    fn pools_turn_nagle_off_and_keep_the_size_asked() {
        let c = redis("[redis]\n");
        assert_eq!(c.pool_size, 4, "the default: four pipelined connections");
        let pool = build_pool(&c, 3, Resends::Allowed).unwrap();
        assert_eq!(pool.size(), 3);
        assert_eq!(pool.connection_config().tcp.nodelay, Some(true));
        let conn = pool.connection_config();
        assert!(
            conn.max_command_attempts > conn.max_redirections,
            "every redirection costs a write attempt: the attempts must outlast them"
        );
    }

    #[test]
    fn cluster_seeds_become_hosts_with_the_first_credentials() {
        let c = redis(
            "[redis]\nmode = \"cluster\"\nnodes = [\"redis://u:p@10.0.0.1:7001\", \"redis://10.0.0.2:7002\"]\n",
        );
        let fred = fred_config(&c).unwrap();
        let ServerConfig::Clustered { hosts, .. } = &fred.server else {
            panic!("not clustered: {:?}", fred.server);
        };
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[1].port, 7002);
        assert_eq!(fred.password.as_deref(), Some("p"));
    }

    #[test]
    fn sentinel_names_its_service_and_credentials() {
        let c = redis(
            "[redis]\nmode = \"sentinel\"\n[redis.sentinel]\nservice_name = \"main\"\n\
             nodes = [\"redis://10.0.0.1:26379\"]\npassword = \"s\"\n",
        );
        let fred = fred_config(&c).unwrap();
        let ServerConfig::Sentinel {
            service_name,
            password,
            ..
        } = &fred.server
        else {
            panic!("not sentinel");
        };
        assert_eq!(service_name, "main");
        assert_eq!(password.as_deref(), Some("s"));
    }
}
