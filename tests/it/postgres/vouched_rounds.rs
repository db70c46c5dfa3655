//! Rounds of vouched claims: concurrent claims share one replica acknowledgement, and
//! each round's probe is one a `WAIT` behind it really counts. Outside cluster mode the
//! probe is a `PUBLISH` (replicated, written to no AOF: nothing to fsync); in cluster
//! mode a `PUBLISH` moves no replication offset, so the probe is a write there, and a
//! replica that stopped is still noticed.

use std::time::Duration;

use idemgate_fleet::{RedisCluster, DURABLE_REDIS};

use super::vouched::{
    fsyncing_redis, gateway, leased_during, leased_rows, post, replica_of, until_kept,
};
use crate::redis::cluster_config;
use crate::support::{MockUpstream, PgServer, TestApp};

/// How many times `redis` ran `command`, from `INFO commandstats`.
fn calls(redis: &idemgate_fleet::RedisServer, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    (stats.lines())
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn concurrent_claims_share_their_replica_acknowledgements() {
    let (redis, pg, up) = (
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let _replica = replica_of(&redis).await;
    let app = gateway(&redis, &pg, &up).await;
    let before = (calls(&redis, "wait"), calls(&redis, "publish"));
    let keys: Vec<String> = (0..100).map(|i| format!("round-{i}")).collect();
    let answers = futures_util::future::join_all(keys.iter().map(|k| post(&app, k))).await;
    assert!(answers.iter().all(|(s, _)| *s == 201), "{answers:?}");
    assert_eq!(leased_rows(&pg).await, 0);
    assert_eq!(
        pg.count("true").await,
        100,
        "each completion written through"
    );
    assert_eq!(up.executions(), 100);
    let rounds = calls(&redis, "wait") - before.0;
    assert!(
        (1..100).contains(&rounds),
        "100 concurrent claims acknowledged in {rounds} WAITs"
    );
    let published = calls(&redis, "publish") - before.1;
    assert!(
        published >= rounds,
        "outside cluster mode each round probes with PUBLISH: {published} for {rounds} rounds"
    );
    let probes = redis.cli(&["EVAL", "return #redis.call('KEYS', '*:probe')", "0"]);
    assert_eq!(probes.trim(), "0", "no probe was written");
}

/// The cluster's gateway: vouched claims.
async fn cluster_gateway(cluster: &RedisCluster, pg: &PgServer, up: &MockUpstream) -> TestApp {
    let extra = pg.section("claims = \"vouched\"");
    let mut cfg = cluster_config(cluster.seed_urls(), &up.url(), &extra);
    cfg.redis.replica_ack_timeout = Duration::from_millis(500);
    TestApp::spawn(cfg).await
}

/// A `PUBLISH` on a cluster node travels on the cluster bus, not in the replication
/// stream: a `WAIT` behind one would count a stopped replica that acknowledged
/// everything before it. So in cluster mode a round's probe is a write, and a claim
/// whose replica stopped takes a Postgres row.
#[tokio::test]
async fn in_cluster_mode_a_round_probes_with_a_write_and_a_stopped_replica_is_seen() {
    let cluster = tokio::task::spawn_blocking(|| {
        RedisCluster::start_on_with(&vec![idemgate_fleet::Host::loopback(); 6], 1, DURABLE_REDIS)
    })
    .await
    .unwrap();
    let (pg, up) = (PgServer::start(), MockUpstream::start().await);
    let app = cluster_gateway(&cluster, &pg, &up).await;
    up.set_delay(Duration::from_millis(800));
    let kept = until_kept(&app, &pg, &up, Duration::from_secs(15)).await;
    assert!(
        kept,
        "the cluster's primaries and replicas vouch for claims"
    );
    let replicas: Vec<usize> = (0..6)
        .filter(|i| !cluster.primaries().contains(i))
        .collect();
    assert_eq!(replicas.len(), 3);
    let published_before: u64 = cluster.nodes().iter().map(|n| calls(n, "publish")).sum();
    for &r in &replicas {
        cluster.nodes()[r].pause();
    }
    let unacknowledged = leased_during(&app, &pg, &up, "replicas-stopped").await;
    for &r in &replicas {
        cluster.nodes()[r].resume();
    }
    assert_eq!(
        unacknowledged,
        (201, 1),
        "no replica acknowledged the claim: a postgres row"
    );
    let published: u64 = cluster.nodes().iter().map(|n| calls(n, "publish")).sum();
    assert_eq!(published, published_before, "no round probed with PUBLISH");
}

/// An ACL user with no channel (Redis 7's default `resetchannels`) cannot `PUBLISH`:
/// its rounds write their probe instead, and its claims are still kept by Redis.
#[tokio::test]
async fn a_user_that_may_not_publish_gets_rounds_that_write_their_probe() {
    let mut args = DURABLE_REDIS.to_vec();
    args.extend([
        "--user",
        "gateway",
        "on",
        ">probe-secret",
        "~*",
        "resetchannels",
    ]);
    args.push("+@all");
    let (redis, pg, up) = (
        crate::support::RedisServer::start_with(&args),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let _replica = replica_of(&redis).await;
    let url = format!("redis://gateway:probe-secret@127.0.0.1:{}", redis.port);
    let cfg = crate::support::config(&url, &up.url(), &pg.section("claims = \"vouched\""));
    let app = TestApp::spawn(cfg).await;
    up.set_delay(Duration::from_millis(800));
    let kept = until_kept(&app, &pg, &up, Duration::from_secs(10)).await;
    assert!(kept, "claims are kept by redis without PUBLISH");
    assert_eq!(calls(&redis, "publish"), 0);
    let probes = redis.cli(&["EVAL", "return #redis.call('KEYS', '*:probe')", "0"]);
    assert_eq!(probes.trim(), "1", "the round wrote its probe");
}
