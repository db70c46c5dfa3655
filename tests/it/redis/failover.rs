//! At the store level, on a real primary and replica: a completion
//! acknowledged with `redis.replica_acks = 1` survives the primary's loss right after
//! the answer (and the same completion without it is lost: the window), a short `WAIT`
//! answers after `redis.replica_ack_timeout`, and fencing tokens never go backwards when
//! a replica that missed the last writes is promoted.
//!
//! Replication lag is made real with a [`HoldProxy`] between the replica and the
//! primary: while held, the primary's replication stream waits in the proxy. The
//! failover is the one Sentinel or Redis Cluster would do: the primary SIGKILLed, the
//! replica promoted (`REPLICAOF NO ONE`), the held stream never delivered.

use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::{ClientLike, ServerInterface};
use fred::types::scripts::Script;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use idemgate::config::RedisConfig;
use idemgate::idempotency::{key, Claim, Completion, Fingerprint, RecordId, Scope, StoredResponse};
use idemgate::testing::store::redis::replicas::{ReplicaWait, Replicated};
use idemgate::testing::store::redis::Acquired;
use idemgate::testing::store::RedisStore;

use super::until_replicated;
use crate::support::holdproxy::HoldProxy;
use crate::support::{eventually, RedisServer, LEASE};
use idemgate::testing::store::redis::slots::Slotted;
use idemgate::testing::store::redis::OnLapsed;

/// A primary and a replica that replicates through a hold proxy.
pub(crate) struct Pair {
    pub(crate) primary: RedisServer,
    replica: RedisServer,
    pub(crate) link: HoldProxy,
}

impl Pair {
    pub(crate) async fn start() -> Self {
        let primary = RedisServer::start();
        let link = HoldProxy::start(([127, 0, 0, 1], primary.port).into()).await;
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &link.port.to_string()]);
        linked(&replica).await;
        Self {
            primary,
            replica,
            link,
        }
    }

    async fn store(&self, replica_acks: u32) -> RedisStore {
        RedisStore::connect(&config(&self.primary, replica_acks))
            .await
            .unwrap()
    }

    /// The failover: SIGKILL the primary, promote the replica (what it has is all there is).
    fn fail_over(&mut self) {
        self.primary.stop();
        let out = self.replica.cli(&["REPLICAOF", "NO", "ONE"]);
        assert_eq!(out.trim(), "OK", "REPLICAOF NO ONE: {out}");
    }
}

/// Waits (up to 10 s) until `replica` is linked to its primary.
async fn linked(replica: &RedisServer) {
    let up = async || replica.info("master_link_status").as_deref() == Some("up");
    assert!(
        eventually(Duration::from_secs(10), up).await,
        "replica never linked"
    );
}

pub(crate) fn config(redis: &RedisServer, replica_acks: u32) -> RedisConfig {
    RedisConfig {
        url: redis.url(),
        replica_acks,
        replica_ack_timeout: Duration::from_millis(600),
        command_timeout: Duration::from_secs(2),
        ..RedisConfig::default()
    }
}

pub(crate) fn record(raw_key: &str) -> (RecordId, Fingerprint) {
    let scope = Scope::anonymous("payments", &[http::header::AUTHORIZATION], None);
    let id = RecordId::new(scope, &key::parse(raw_key.as_bytes(), 255).unwrap(), None);
    let json = HeaderValue::from_static("application/json");
    let uri = "/v1/payments".parse().unwrap();
    (
        id,
        Fingerprint::new(
            &Default::default(),
            &Method::POST,
            &uri,
            &HeaderMap::from_iter([(http::header::CONTENT_TYPE, json)]),
            b"{}",
        ),
    )
}

pub(crate) fn response() -> Bytes {
    StoredResponse::from_upstream(StatusCode::CREATED, &HeaderMap::new(), "paid".into()).encode()
}

pub(crate) async fn acquire(
    store: &RedisStore,
    k: &str,
    fp: &Fingerprint,
    token: &str,
) -> Acquired {
    match store
        .claim(
            Slotted::new(k),
            fp,
            token,
            (LEASE, LEASE),
            true,
            OnLapsed::Ask,
        )
        .await
        .unwrap()
    {
        Claim::Acquired(a) => a,
        other => panic!("not acquired: {other:?}"),
    }
}

/// Claims while the link flows, then completes with the replication stream held for
/// 250 ms (released by a timer), kills the primary the moment the completion answers
/// and promotes the replica. Returns the completion's duration and whether the
/// promoted replica has the completed record.
async fn complete_then_fail_over(replica_acks: u32) -> (Duration, bool) {
    let mut pair = Pair::start().await;
    let store = pair.store(replica_acks).await;
    let (id, fp) = record(&format!("survives-{replica_acks}"));
    let k = store.record_key(id);
    acquire(&store, &k, &fp, "holder").await;
    // The lease reached the replica; from now on the stream waits in the proxy.
    until_replicated(&pair.primary, &pair.replica).await;
    pair.link.hold(true);
    let started = Instant::now();
    let release = {
        let hold = pair.link.hold_handle();
        tokio::spawn(async move {
            // Real time: the replication lag the completion's WAIT must sit out.
            tokio::time::sleep(Duration::from_millis(250)).await;
            hold.send_replace(false);
        })
    };
    let done = store
        .complete(&k, "holder", response(), LEASE, &fp)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(done, Completion::Stored);
    // Answered: the primary dies now, before the timer releases anything still held.
    pair.link.hold(true);
    release.abort();
    pair.fail_over();
    let state = pair.replica.record_field(&k, "s").await;
    (took, state.as_deref() == Some(b"C".as_slice()))
}

#[tokio::test]
async fn a_completion_acknowledged_with_replica_acks_survives_a_primary_kill() {
    let (took, survived) = complete_then_fail_over(1).await;
    assert!(
        survived,
        "acknowledged with replica_acks = 1, yet lost in the failover"
    );
    // It waited for the replica (the 250 ms hold), not for the timeout (600 ms).
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(550),
        "{took:?}"
    );
}

#[tokio::test]
async fn without_replica_acks_the_same_completion_is_lost() {
    // The window that replica_acks closes: answered at once, never replicated.
    let (took, survived) = complete_then_fail_over(0).await;
    assert!(took < Duration::from_millis(200), "{took:?}");
    assert!(
        !survived,
        "the held stream reached the replica: this test no longer shows the window"
    );
}

#[tokio::test]
async fn a_short_wait_answers_after_the_timeout_and_says_so() {
    let pair = Pair::start().await;
    let store = pair.store(1).await;
    let (id, fp) = record("short");
    let k = store.record_key(id);
    acquire(&store, &k, &fp, "holder").await;
    pair.link.hold(true);
    let started = Instant::now();
    let done = store
        .complete(&k, "holder", response(), LEASE, &fp)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        done,
        Completion::Stored,
        "stored on the primary all the same"
    );
    assert!(took >= Duration::from_millis(550), "{took:?}");

    // What the store counts and logs: Short, with the replicas that did acknowledge.
    let wait = ReplicaWait::connect(&config(&pair.primary, 1), false)
        .await
        .unwrap()
        .expect("replica_acks = 1 builds the WAIT connections");
    let script = Script::from_lua("redis.call('SET', KEYS[1], ARGV[1]) return 1");
    let (reply, replicated) = wait.run(&script, "plain", vec!["v".into()]).await.unwrap();
    assert_eq!(reply.as_i64(), Some(1));
    assert_eq!(
        replicated,
        Replicated::Short {
            acked: 0,
            wanted: 1
        }
    );
    pair.link.hold(false);
    let (_, replicated) = wait.run(&script, "plain", vec!["w".into()]).await.unwrap();
    assert_eq!(replicated, Replicated::Acknowledged);
}

#[tokio::test]
async fn fencing_tokens_never_go_backwards_across_a_failover() {
    let mut pair = Pair::start().await;
    let store = pair.store(0).await;
    let (id, fp) = record("fenced");
    let k = store.record_key(id);
    let first = acquire(&store, &k, &fp, "t0").await.fence;
    store.release(&k, "t0").await.unwrap();
    until_replicated(&pair.primary, &pair.replica).await;
    // The replica has the fence key at `first`; the primary hands out more it never sees.
    pair.link.hold(true);
    let mut last = first;
    for i in 1..=20 {
        let token = format!("t{i}");
        let fence = acquire(&store, &k, &fp, &token).await.fence;
        assert!(
            fence > last,
            "fences grow on one primary: {fence} after {last}"
        );
        last = fence;
        store.release(&k, &token).await.unwrap();
    }
    pair.fail_over();
    let promoted = RedisStore::connect(&config(&pair.replica, 0))
        .await
        .unwrap();
    let after = acquire(&promoted, &k, &fp, "after").await.fence;
    assert!(
        after > last,
        "fence went backwards across the failover: {after} after {last} (first {first})"
    );
}

/// The cost of `replica_acks = 1` on loopback (not an assertion: printed with
/// `--nocapture`): completions without `WAIT`, with `WAIT` pipelined after the script
/// (what the store does), and with `WAIT` as a second round trip.
#[tokio::test]
#[ignore = "measurement: cargo test --release --test it failover::cost -- --ignored --nocapture"]
async fn cost_of_replica_acks() {
    let pair = Pair::start().await;
    const N: usize = 2000;
    let mut rows = Vec::new();
    for replica_acks in [0, 1] {
        let store = pair.store(replica_acks).await;
        let mut took = Vec::with_capacity(N);
        for i in 0..N {
            let (id, fp) = record(&format!("cost-{replica_acks}-{i}"));
            let k = store.record_key(id);
            acquire(&store, &k, &fp, "h").await;
            let t = Instant::now();
            store
                .complete(&k, "h", response(), LEASE, &fp)
                .await
                .unwrap();
            took.push(t.elapsed());
        }
        rows.push((format!("replica_acks = {replica_acks} (pipelined)"), took));
    }
    // Two round trips: the script, then WAIT, on one connection.
    let client = pair.primary.client().await;
    let script = Script::from_lua("redis.call('SET', KEYS[1], ARGV[1]) return 1");
    let mut took = Vec::with_capacity(N);
    for i in 0..N {
        let t = Instant::now();
        let _: i64 = script
            .evalsha_with_reload(&client, format!("seq-{i}"), vec![response()])
            .await
            .unwrap();
        let _: i64 = client.wait(1, 600).await.unwrap();
        took.push(t.elapsed());
    }
    rows.push(("SET script + WAIT, two round trips".into(), took));
    for (name, mut took) in rows {
        took.sort();
        let p = |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_micros();
        println!(
            "{name}: p50 {} us, p99 {} us over {N} completions",
            p(0.5),
            p(0.99)
        );
    }
    let _ = client.quit().await;
}

/// With a healthy replica linked directly (no proxy), `WAIT 1` after the completion
/// script comes back as soon as the replica acknowledges (milliseconds on loopback),
/// sequentially and with many completions sharing the pool's connections: never the
/// `redis.replica_ack_timeout`.
async fn wait_returns_on_the_ack(cfg: RedisConfig) {
    let wait = std::sync::Arc::new(ReplicaWait::connect(&cfg, false).await.unwrap().unwrap());
    let script = std::sync::Arc::new(Script::from_lua(
        "redis.call('SET', KEYS[1], ARGV[1]) return 1",
    ));
    let started = Instant::now();
    for i in 0..20 {
        let t = Instant::now();
        let (_, replicated) = wait
            .run(&script, &format!("seq-{i}"), vec!["v".into()])
            .await
            .unwrap();
        assert_eq!(replicated, Replicated::Acknowledged, "WAIT #{i}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "WAIT #{i} took {:?}",
            t.elapsed()
        );
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (wait, script) = (wait.clone(), script.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let (_, replicated) = wait
                .run(&script, &format!("par-{i}"), vec!["v".into()])
                .await
                .unwrap();
            (replicated, t.elapsed())
        }));
    }
    let mut slowest = Duration::ZERO;
    for t in tasks {
        let (replicated, took) = t.await.unwrap();
        assert_eq!(replicated, Replicated::Acknowledged);
        slowest = slowest.max(took);
    }
    assert!(
        slowest < Duration::from_millis(1500),
        "slowest concurrent WAIT {slowest:?}"
    );
    println!(
        "220 completions with WAIT in {:?}, slowest concurrent {slowest:?}",
        started.elapsed()
    );
    wait.quit().await;
}

#[tokio::test]
async fn wait_returns_on_the_replicas_ack_not_the_timeout() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    linked(&replica).await;
    let mut cfg = config(&primary, 1);
    cfg.replica_ack_timeout = Duration::from_secs(2);
    wait_returns_on_the_ack(cfg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_on_the_replicas_ack_in_a_cluster() {
    let cluster = tokio::task::spawn_blocking(idemgate_fleet::RedisCluster::start)
        .await
        .unwrap();
    let cfg = RedisConfig {
        mode: idemgate::config::RedisMode::Cluster,
        nodes: cluster.seed_urls(),
        replica_acks: 1,
        replica_ack_timeout: Duration::from_secs(2),
        command_timeout: Duration::from_secs(3),
        ..RedisConfig::default()
    };
    wait_returns_on_the_ack(cfg).await;
}
