//! The recovery-time bounds: real time, which a loaded machine stretches, so `make test`
//! runs every `realtime` module alone, after the other tests (tests/run.sh).

use std::time::{Duration, Instant};

use idemgate_fleet::RedisCluster;

use super::{gateway, keys_by_primary, pause_until_open, until_claims_back};
use crate::support::{read, MockUpstream, TestApp};

/// A cluster, the gateway on it, and one shard paused until its breaker opened: its
/// primary, that primary's replica, and 400 keys it serves (the first one completed
/// before the pause, 200 onwards sent while pausing).
struct Paused {
    cluster: RedisCluster,
    _upstream: MockUpstream,
    app: TestApp,
    keys: Vec<String>,
    primary: usize,
    replica: usize,
    /// When the pause began.
    at: Instant,
}

async fn paused_shard(prefix: &str) -> Paused {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(gateway(&cluster, &upstream)).await;
    let mut keys = tokio::task::block_in_place(|| keys_by_primary(&cluster, prefix, 400));
    let primary = *keys.keys().min().unwrap();
    let replica = tokio::task::block_in_place(|| cluster.replica_of(primary)).unwrap();
    let keys = keys.remove(&primary).unwrap();
    let (status, _, _) = read(app.post(&keys[0], "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    let at = Instant::now();
    pause_until_open(&cluster, &app, primary, &keys[200..]).await;
    Paused {
        cluster,
        _upstream: upstream,
        app,
        keys,
        primary,
        replica,
        at,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_back_within_two_seconds_of_a_paused_primary_resuming() {
    let s = paused_shard("r").await;
    tokio::task::block_in_place(|| s.cluster.resume(s.primary));
    let resumed_after = s.at.elapsed();
    let back = until_claims_back(&s.app, &s.keys[1..200]).await;
    let role = tokio::task::block_in_place(|| s.cluster.nodes()[s.replica].cli(&["ROLE"]));
    let failed_over = role.starts_with("master");
    eprintln!("paused {resumed_after:?} (failed over: {failed_over}); claims back {back:?} after the resume");
    assert!(
        back < Duration::from_millis(2000),
        "claims back {back:?} after the resume"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_back_within_three_seconds_of_a_failover() {
    let s = paused_shard("f").await;
    // The cluster promotes the replica (cluster-node-timeout 1 s); the old primary stays
    // paused: the promoted replica is what is reachable again.
    let promoted = Duration::from_secs(20);
    tokio::task::block_in_place(|| s.cluster.wait_primary(s.replica, promoted));
    let back = until_claims_back(&s.app, &s.keys[1..200]).await;
    tokio::task::block_in_place(|| s.cluster.resume(s.primary));
    eprintln!("claims back {back:?} after the promotion");
    assert!(
        back < Duration::from_millis(3000),
        "claims back {back:?} after the promotion"
    );
}
