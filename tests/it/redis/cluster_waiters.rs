//! In a cluster, waiting duplicates are woken over sharded pub/sub
//! (`SPUBLISH` in the record's slot, on its shard only), with one `SSUBSCRIBE` per
//! waited record and replica, dropped when the last waiter leaves, a caller that hangs
//! up included.

use std::time::{Duration, Instant};

use idemgate::testing::store::redis::slots::slot;
use idemgate_fleet::RedisCluster;

use super::cluster_config;
use super::record_key;
use crate::support::{eventually, read, MockUpstream, TestApp};

const WAIT: &str =
    "[idempotency]\nin_flight = \"wait\"\nmax_waiters = 10\nwait_timeout = \"10s\"\n";

/// The subscriber count in a `PUBSUB NUMSUB`/`SHARDNUMSUB` reply of one channel
/// (`redis-cli` prints the channel, then its count).
fn numsub(out: &str) -> u64 {
    out.lines()
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn channel_of(key: &str) -> String {
    format!("{}:done", record_key(key))
}

/// Subscribers of the sharded channel of `key` on the node serving its slot.
fn shard_subscribers(cluster: &RedisCluster, key: &str) -> u64 {
    let channel = channel_of(key);
    let node = cluster.primary_for_slot(slot(&channel));
    numsub(&cluster.nodes()[node].cli(&["PUBSUB", "SHARDNUMSUB", &channel]))
}

/// Subscribers of the classic channel of `key` on every node (none expected).
fn classic_subscribers(cluster: &RedisCluster, key: &str) -> u64 {
    let channel = channel_of(key);
    (cluster.nodes().iter())
        .map(|n| numsub(&n.cli(&["PUBSUB", "NUMSUB", &channel])))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_subscriptions_follow_the_waiters() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let nodes = cluster.seed_urls();
    let app = TestApp::spawn(cluster_config(nodes, &upstream.url(), WAIT)).await;
    let subs = |key: &'static str| tokio::task::block_in_place(|| shard_subscribers(&cluster, key));

    // One slow execution, three duplicates waiting on it: one subscription.
    upstream.set_delay(Duration::from_millis(1500));
    let first = tokio::spawn(app.post("held", "{}").send());
    upstream.until_executions(1).await;
    let started = Instant::now();
    let waiting: Vec<_> = (0..3)
        .map(|_| tokio::spawn(app.post("held", "{}").send()))
        .collect();
    // And a caller that gives up while waiting.
    let impatient = app
        .post("held", "{}")
        .timeout(Duration::from_millis(400))
        .send();
    assert!(impatient.await.is_err(), "hung up while waiting");
    assert_eq!(subs("held"), 1, "one SSUBSCRIBE per record and replica");
    assert_eq!(
        tokio::task::block_in_place(|| classic_subscribers(&cluster, "held")),
        0
    );
    assert_eq!(read(first.await.unwrap().unwrap()).await.0, 201);
    for w in waiting {
        let (status, headers, _) = read(w.await.unwrap().unwrap()).await;
        assert_eq!(
            (status, &headers["idempotent-replayed"]),
            (201, &"true".parse().unwrap())
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "woken by the completion"
    );
    assert_eq!(upstream.executions(), 1);
    assert!(
        eventually(Duration::from_secs(3), async || subs("held") == 0).await,
        "unsubscribed once the last waiter left"
    );

    // The only waiter hangs up while the execution still runs: unsubscribed at once.
    let second = tokio::spawn(app.post("alone", "{}").send());
    upstream.until_executions(2).await;
    let lone = app
        .post("alone", "{}")
        .timeout(Duration::from_millis(400))
        .send();
    assert!(lone.await.is_err());
    assert!(
        eventually(Duration::from_millis(800), async || subs("alone") == 0).await,
        "a caller that hangs up leaves no subscription behind"
    );
    assert_eq!(read(second.await.unwrap().unwrap()).await.0, 201);
    assert_eq!(upstream.executions(), 2);
}

/// Subscribers of the sharded channel of `key`, summed over every primary.
fn shard_subscribers_anywhere(cluster: &RedisCluster, key: &str) -> u64 {
    let channel = channel_of(key);
    (cluster.primaries().into_iter())
        .map(|i| numsub(&cluster.nodes()[i].cli(&["PUBSUB", "SHARDNUMSUB", &channel])))
        .sum()
}

/// The slot of a waited record moves to another primary mid-wait.
/// The old owner drops the sharded subscription (Redis unsubscribes a slot's shard
/// channels when the node loses the slot) and the completion is published on the new
/// owner; the waiter still gets the replay soon after the completion (it re-subscribes
/// and re-checks the record), not at its `wait_timeout`, and leaves no subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_survives_its_slot_moving() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(cluster_config(cluster.seed_urls(), &upstream.url(), WAIT)).await;
    let subs = |key: &'static str| tokio::task::block_in_place(|| shard_subscribers(&cluster, key));

    upstream.set_delay(Duration::from_millis(3000));
    let started = Instant::now();
    let first = tokio::spawn(app.post("moving", "{}").send());
    upstream.until_executions(1).await;
    let waiter = tokio::spawn(app.post("moving", "{}").send());
    assert!(
        eventually(Duration::from_secs(2), async || subs("moving") == 1).await,
        "the waiter subscribed on the record's shard"
    );
    // Move the record's slot (its lease key with it) to another primary.
    let record_slot = slot(&record_key("moving"));
    tokio::task::block_in_place(|| {
        let owner = cluster.primary_for_slot(record_slot);
        let to = (cluster.primaries().into_iter())
            .find(|&p| p != owner)
            .unwrap();
        cluster.move_slot(record_slot, to).unwrap();
        cluster.wait_ok(Duration::from_secs(10));
        assert_eq!(cluster.primary_for_slot(record_slot), to);
        assert_eq!(
            cluster.nodes()[owner]
                .cli(&[
                    "PUBSUB",
                    "SHARDNUMSUB",
                    &format!("{}:done", record_key("moving"))
                ])
                .lines()
                .nth(1)
                .map(str::trim),
            Some("0"),
            "the old owner dropped the subscription with the slot"
        );
    });
    assert_eq!(read(first.await.unwrap().unwrap()).await.0, 201);
    let completed = started.elapsed();
    let (status, headers, _) = read(waiter.await.unwrap().unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"true".parse().unwrap())
    );
    let woken = started.elapsed();
    assert!(
        woken < completed + Duration::from_millis(2500),
        "replayed {:?} after the completion (wait_timeout is 10s)",
        woken - completed
    );
    assert_eq!(upstream.executions(), 1);
    assert!(
        eventually(Duration::from_secs(3), async || {
            tokio::task::block_in_place(|| shard_subscribers_anywhere(&cluster, "moving")) == 0
        })
        .await,
        "no subscription left on any primary"
    );
}
