//! The core behaviours against a real Redis Cluster (six nodes, three
//! primaries) and a real Sentinel set (primary, replica, three sentinels), started by
//! the fleet launcher: first execution and byte-identical replay, mismatch, 50
//! concurrent duplicates across three gateway instances with one execution (the
//! duplicates wait, woken over pub/sub: sharded in a cluster), admin invalidation
//! reaching every instance's replay cache, tenant isolation. One topology per test,
//! shared by every behaviour.

use std::time::{Duration, Instant};

use bytesize::ByteSize;
use futures_util::future::join_all;
use idemgate::Config;
use idemgate_fleet::{RedisCluster, SentinelSet};

use super::{cluster_config, sentinel_config};
use crate::support::{comparable, eventually, problem_code, read, tally, MockUpstream, TestApp};

const TOKEN: &str = "topology-test-admin-token";

/// Waiting duplicates, the replay cache and the admin API on, so every behaviour
/// runs with the same instances.
fn extra() -> String {
    format!(
        "[admin]\ntoken = \"{TOKEN}\"\n\
         [idempotency]\nin_flight = \"wait\"\nmax_waiters = 100\nwait_timeout = \"10s\"\n"
    )
}

async fn three(make: impl Fn() -> Config) -> Vec<TestApp> {
    let mut apps = Vec::new();
    for _ in 0..3 {
        let mut c = make();
        c.replay_cache.max_bytes = ByteSize::mib(1);
        apps.push(TestApp::spawn(c).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // subscriptions settle
    apps
}

/// Waits (up to 5 s) until no replay cache of `apps` holds the record of `key`.
async fn dropped_everywhere(apps: &[TestApp], key: &str) -> bool {
    let dropped = async || !apps.iter().any(|a| a.caches(key));
    eventually(Duration::from_secs(5), dropped).await
}

/// Every core behaviour, in turn, on the three instances `apps` in front of `upstream`.
async fn core_behaviours(apps: &[TestApp], upstream: &MockUpstream) {
    first_executions_replays_and_mismatches(apps, upstream).await;
    a_burst_of_duplicates_runs_once(apps, upstream).await;
    invalidation_reaches_every_replay_cache(apps, upstream).await;
    tenants_are_isolated(apps, upstream).await;
}

/// First execution, then byte-identical replays from Redis on the other instances
/// (their replay caches have not seen the keys), over keys on every shard; the same key
/// with another body is a mismatch.
async fn first_executions_replays_and_mismatches(apps: &[TestApp], upstream: &MockUpstream) {
    for i in 0..12 {
        let key = format!("first-{i}");
        let body = format!("{{\"amount\":{i}}}");
        let (s1, h1, b1) = read(apps[0].post(&key, &body).send().await.unwrap()).await;
        assert_eq!(
            (s1, &h1["idempotent-replayed"]),
            (201, &"false".parse().unwrap())
        );
        for app in &apps[1..] {
            let (s2, h2, b2) = read(app.post(&key, &body).send().await.unwrap()).await;
            assert_eq!(
                (s2, &h2["idempotent-replayed"]),
                (201, &"true".parse().unwrap())
            );
            assert_eq!(comparable(&h2), comparable(&h1), "{key}");
            assert_eq!(b2, b1, "{key}");
        }
        // Mismatch: the same key with another body.
        let (s3, h3, b3) = read(apps[2].post(&key, "{\"amount\":-1}").send().await.unwrap()).await;
        assert_eq!(
            (s3, problem_code(&h3, &b3).as_str()),
            (422, "idempotency_key_reused")
        );
    }
    assert_eq!(upstream.executions(), 12);
}

/// 50 concurrent duplicates across three instances: one execution; the others wait
/// and are woken by the completion, and get the same answer.
async fn a_burst_of_duplicates_runs_once(apps: &[TestApp], upstream: &MockUpstream) {
    // 50 concurrent duplicates across three instances: one execution; the others wait
    // and are woken by the completion (a missed wake-up would wait out the 30 s lease
    // and end as a 409 after wait_timeout).
    upstream.set_delay(Duration::from_millis(500));
    let started = Instant::now();
    let burst = (0..50).map(|i| async move {
        read(
            apps[i % 3]
                .post("burst", "{\"amount\":5}")
                .send()
                .await
                .unwrap(),
        )
        .await
    });
    let answers = join_all(burst).await;
    upstream.set_delay(Duration::ZERO);
    let t = tally(&answers);
    assert_eq!((t.first, t.replayed, t.in_flight), (1, 49, 0), "{t:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken, not timed out"
    );
    assert_eq!(
        upstream.executions(),
        13,
        "exactly one more upstream execution"
    );
    let first = answers
        .iter()
        .find(|a| a.1["idempotent-replayed"] == "false")
        .unwrap();
    for (_, headers, body) in &answers {
        assert_eq!(
            (comparable(headers), body),
            (comparable(&first.1), &first.2)
        );
    }
}

/// Admin invalidation reaches every instance's replay cache: the key runs again, and
/// every instance replays the new execution.
async fn invalidation_reaches_every_replay_cache(apps: &[TestApp], upstream: &MockUpstream) {
    // Admin invalidation reaches every instance's replay cache (all three hold "burst").
    let url = format!("http://{}/admin/keys/payments/burst", apps[1].admin);
    let deleted = (apps[1].client.delete(url).bearer_auth(TOKEN).send().await).unwrap();
    assert_eq!(deleted.status(), 200);
    assert!(dropped_everywhere(apps, "burst").await, "a cache kept it");
    let (_, h, fresh) = read(
        apps[0]
            .post("burst", "{\"amount\":5}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        h["idempotent-replayed"], "false",
        "invalidated: it runs again"
    );
    for app in &apps[1..] {
        let (_, h, b) = read(app.post("burst", "{\"amount\":5}").send().await.unwrap()).await;
        assert_eq!(h["idempotent-replayed"], "true");
        assert_eq!(b, fresh, "the new execution, not a stale cached copy");
    }
    assert_eq!(upstream.executions(), 14);
}

/// Tenant isolation: the same key and body under two tenants are two records.
async fn tenants_are_isolated(apps: &[TestApp], upstream: &MockUpstream) {
    let as_tenant = |app: &TestApp, who: &str| {
        app.post("shared-key", "{}")
            .header("Authorization", format!("Bearer {who}"))
            .send()
    };
    let (_, _, alice) = read(as_tenant(&apps[0], "alice").await.unwrap()).await;
    let (_, hb, bob) = read(as_tenant(&apps[1], "bob").await.unwrap()).await;
    assert_eq!(
        hb["idempotent-replayed"], "false",
        "bob never sees alice's response"
    );
    assert_ne!(alice, bob);
    let (_, ha, again) = read(as_tenant(&apps[2], "alice").await.unwrap()).await;
    assert_eq!(
        (&ha["idempotent-replayed"], &again),
        (&"true".parse().unwrap(), &alice)
    );
    assert_eq!(upstream.executions(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_behaviours_on_a_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let nodes = cluster.seed_urls();
    let apps = three(|| cluster_config(nodes[..2].to_vec(), &upstream.url(), &extra())).await;
    core_behaviours(&apps, &upstream).await;
    // The keys are spread over the shards: every primary holds records.
    for i in tokio::task::block_in_place(|| cluster.primaries()) {
        let keys = tokio::task::block_in_place(|| cluster.cli(i, &["KEYS", "idemgate:{*}"]));
        assert!(keys.lines().count() > 0, "primary {i} holds no record");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_behaviours_on_redis_sentinel() {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let apps = three(|| sentinel_config(&set, &upstream.url(), &extra())).await;
    core_behaviours(&apps, &upstream).await;
    let primary = &set.servers()[set.primary()];
    let keys = tokio::task::block_in_place(|| primary.cli(&["DBSIZE"]));
    assert!(
        keys.trim().parse::<u64>().unwrap() > 0,
        "records are on the primary"
    );
}
