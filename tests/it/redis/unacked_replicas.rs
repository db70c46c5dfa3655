//! `redis.replica_acks` when the replicas stop acknowledging (the Sentinel partition
//! rows): `WAIT` blocks its connection for `redis.replica_ack_timeout`, and the
//! completions pipelined behind it wait in Redis; with no replica acknowledging, the
//! `WAIT` connections complete one record per `replica_ack_timeout` each and every
//! completion beyond that times out. After one short `WAIT` a shard's completions go
//! without it, until a check sees the replicas acknowledge a write again.
//!
//! On a real primary and replica, the replication stream held in a [`HoldProxy`]
//! (`super::failover::Pair`): the primary keeps the replica as connected, so every
//! `WAIT` lasts the whole timeout, as behind a partition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::idempotency::Completion;
use idemgate::testing::store::RedisStore;

use super::failover::{acquire, config, record, response, Pair};
use crate::support::{eventually, LEASE};

/// Claims `name` and completes it; how long the completion took.
async fn claim_and_complete(store: &RedisStore, name: &str) -> Duration {
    let (id, fp) = record(name);
    let k = store.record_key(id);
    acquire(store, &k, &fp, "holder").await;
    let started = Instant::now();
    let done = store.complete(&k, "holder", response(), LEASE, &fp).await;
    let took = started.elapsed();
    assert_eq!(done.unwrap(), Completion::Stored, "{name}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_stop_waiting_for_replicas_that_do_not_acknowledge_then_wait_again() {
    let pair = Pair::start().await;
    // replica_ack_timeout 600 ms, command timeout 2 s, four WAIT connections.
    let store = Arc::new(
        RedisStore::connect(&config(&pair.primary, 1))
            .await
            .unwrap(),
    );
    assert!(claim_and_complete(&store, "healthy").await < Duration::from_millis(500));

    pair.link.hold(true);
    let first = claim_and_complete(&store, "first-short").await;
    assert!(
        first >= Duration::from_millis(550),
        "a short WAIT: {first:?}"
    );

    // 40 completions at once: waiting 600 ms each on four connections would take 6 s,
    // past every caller's command timeout.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            claim_and_complete(&store, &format!("burst-{i}")).await
        }));
    }
    let mut slowest = Duration::ZERO;
    for t in tasks {
        slowest = slowest.max(t.await.unwrap());
    }
    assert!(
        slowest < Duration::from_millis(400),
        "completions still waited for replicas that do not acknowledge: slowest {slowest:?}"
    );

    // The check while the replica still does not acknowledge changes nothing.
    store.recheck_replicas().await;
    let still = claim_and_complete(&store, "still-held").await;
    assert!(still < Duration::from_millis(400), "{still:?}");

    // Once it acknowledges again, completions wait for it again: held once more, a
    // completion lasts the whole replica_ack_timeout.
    pair.link.hold(false);
    let (mut attempt, mut took) = (0, Duration::ZERO);
    let waits = eventually(Duration::from_secs(10), async || {
        attempt += 1;
        store.recheck_replicas().await;
        pair.link.hold(true);
        took = claim_and_complete(&store, &format!("waits-again-{attempt}")).await;
        pair.link.hold(false);
        took >= Duration::from_millis(550)
    });
    assert!(
        waits.await,
        "completions never waited for the replica again ({took:?})"
    );
}

/// A completion whose `WAIT` pipeline fails stops the waiting too: stuck behind earlier
/// `WAIT`s (or on a connection fred re-made and flushed its queue into), the short
/// replies arrive after the callers left and are never seen. Here the primary stops
/// answering (SIGSTOP) while the replica does not acknowledge: the completion times out;
/// once the primary answers again, its retry goes without `WAIT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_wait_fails_is_retried_without_it() {
    let pair = Pair::start().await;
    let mut cfg = config(&pair.primary, 1);
    cfg.command_timeout = Duration::from_millis(800);
    let store = RedisStore::connect(&cfg).await.unwrap();
    assert!(claim_and_complete(&store, "healthy").await < Duration::from_millis(500));

    pair.link.hold(true);
    let (id, fp) = record("timed-out");
    let k = store.record_key(id);
    acquire(&store, &k, &fp, "holder").await;
    pair.primary.pause();
    let failed = store.complete(&k, "holder", response(), LEASE, &fp).await;
    pair.primary.resume();
    assert!(
        failed.is_err(),
        "completed on a stopped primary: {failed:?}"
    );

    let started = Instant::now();
    let retried = store.complete(&k, "holder", response(), LEASE, &fp).await;
    let took = started.elapsed();
    assert_eq!(retried.unwrap(), Completion::Stored);
    assert!(
        took < Duration::from_millis(500),
        "the retry waited for the replica that does not acknowledge: {took:?}"
    );
}
