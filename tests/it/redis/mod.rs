//! Redis deployments and their bad moments: a Cluster and Sentinel (topologies,
//! waiters over sharded pub/sub, resharding, per-shard warmth), primary failover and
//! `replica_acks`, partitions, an unreachable Redis, and the record layouts of the
//! previous release.

mod cluster_waiters;
mod epoch_markers;
mod failover;
mod outage;
mod partitions;
mod record_format;
mod resharding;
mod sentinel_partition;
mod shard_warmth;
mod topologies;
mod unacked_replicas;
mod wait_connection;

use std::time::Duration;

use idemgate::config::RedisMode;
use idemgate::idempotency::{key, RecordId, Scope};
use idemgate::Config;
use idemgate_fleet::{RedisServer, SentinelSet};

use crate::support::{config, eventually};

/// The Redis key of a request key in the shared anonymous scope the tests use.
pub fn record_key(raw: &str) -> String {
    let scope = Scope::anonymous("payments", &[http::header::AUTHORIZATION], None);
    let id = RecordId::new(scope, &key::parse(raw.as_bytes(), 255).unwrap(), None);
    format!("idemgate:{{{}}}", id.to_hex())
}

/// A gateway configuration for a cluster given by its seed nodes.
pub fn cluster_config(nodes: Vec<String>, upstream: &str, extra: &str) -> Config {
    let mut c = config("redis://127.0.0.1:1", upstream, extra);
    c.redis.mode = RedisMode::Cluster;
    c.redis.nodes = nodes;
    c.redis.command_timeout = Duration::from_secs(1);
    c.redis.connect_timeout = Duration::from_secs(2);
    c
}

/// A gateway configuration for a Sentinel set.
pub fn sentinel_config(set: &SentinelSet, upstream: &str, extra: &str) -> Config {
    let mut c = config("redis://127.0.0.1:1", upstream, extra);
    c.redis.mode = RedisMode::Sentinel;
    c.redis.sentinel.service_name = idemgate_fleet::SENTINEL_SERVICE.to_string();
    c.redis.sentinel.nodes = set.sentinel_urls();
    c.redis.command_timeout = Duration::from_secs(1);
    c.redis.connect_timeout = Duration::from_secs(2);
    c
}

/// Waits (up to 10 s) until `replica` has applied every write `primary` made so far.
pub async fn until_replicated(primary: &RedisServer, replica: &RedisServer) {
    let offset = |r: &RedisServer, field| r.info(field).and_then(|o| o.parse::<u64>().ok());
    let written = offset(primary, "master_repl_offset").expect("the primary's offset");
    let applied = eventually(Duration::from_secs(10), async || {
        offset(replica, "slave_repl_offset").is_some_and(|o| o >= written)
    });
    assert!(applied.await, "the replica never reached offset {written}");
}
