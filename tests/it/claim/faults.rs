//! The lease heartbeat, fencing tokens, waiting duplicates and
//! ambiguous upstream outcomes.

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::support::{config, problem_code, read, stack, until_subscribed};
use crate::support::{MockUpstream, RedisServer, TestApp};

fn fence(upstream: &MockUpstream, i: usize) -> u64 {
    let seen = upstream.seen();
    seen[i].headers["idempotency-fencing-token"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn heartbeat_keeps_a_slow_upstream_call_exclusive_past_lock_ttl() {
    // lock_ttl 900ms (3 x the 300ms command timeout); the upstream takes 2.5 s.
    let (redis, upstream, app) = stack("[idempotency]\nlock_ttl = \"900ms\"\nttl = \"1h\"\n").await;
    upstream.set_delay(Duration::from_millis(2500));
    let first = tokio::spawn(app.post("slow", "{}").send());
    for wait in [600, 700, 700] {
        // Real time: the call outlives lock_ttl, which only the heartbeat makes up for.
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let (status, headers, body) = read(app.post("slow", "{}").send().await.unwrap()).await;
        assert_eq!(status, 409, "still leased after {wait} ms more");
        assert_eq!(problem_code(&headers, &body), "idempotency_key_in_flight");
    }
    let key = &redis.records().await[0];
    let left = redis.pttl(key).await;
    assert!(
        left > 0 && left <= 900,
        "the lease is extended in steps of lock_ttl, got {left}"
    );
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(
        upstream.executions(),
        1,
        "no duplicate started while the holder lived"
    );
}

#[tokio::test]
async fn fencing_tokens_grow_across_acquisitions_and_tiers() {
    let (mut redis, _pg, upstream, app) =
        crate::support::durable_stack("claims = \"redis\"", "").await;
    upstream.push_statuses(&[503, 503]);
    for _ in 0..3 {
        app.post("fenced", "{}").send().await.unwrap();
    }
    assert_eq!(
        upstream.executions(),
        3,
        "two releases, then a stored answer"
    );
    assert!(fence(&upstream, 0) < fence(&upstream, 1) && fence(&upstream, 1) < fence(&upstream, 2));
    // Claims in Postgres (Redis down) carry tokens from the same ordering.
    redis.stop();
    upstream.push_statuses(&[503]);
    app.post("pg-fenced", "{}").send().await.unwrap();
    app.post("pg-fenced", "{}").send().await.unwrap();
    assert_eq!(upstream.executions(), 5);
    assert!(
        fence(&upstream, 2) < fence(&upstream, 3),
        "postgres tokens follow redis ones"
    );
    assert!(fence(&upstream, 3) < fence(&upstream, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_duplicates_get_the_replay_woken_by_pubsub_across_replicas() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let extra = "[idempotency]\nin_flight = \"wait\"\nwait_timeout = \"10s\"\n";
    let one = TestApp::spawn(config(&redis.url(), &upstream.url(), extra)).await;
    let two = TestApp::spawn(config(&redis.url(), &upstream.url(), extra)).await;
    until_subscribed(&redis, 2).await;
    upstream.set_delay(Duration::from_millis(700));
    let holder = tokio::spawn(one.post("w", "{\"a\":1}").send());
    upstream.until_executions(1).await;
    let started = Instant::now();
    let waiters = join_all((0..5).map(|i| {
        let app = if i % 2 == 0 { &one } else { &two };
        async move { read(app.post("w", "{\"a\":1}").send().await.unwrap()).await }
    }))
    .await;
    let waited = started.elapsed();
    let (_, _, original) = read(holder.await.unwrap().unwrap()).await;
    for (status, headers, body) in &waiters {
        assert_eq!(*status, 201);
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(body, &original);
    }
    assert_eq!(upstream.executions(), 1);
    // Woken by the completion, not by the 30 s lease running out, nor by polling late.
    assert!(waited < Duration::from_millis(1500), "waited {waited:?}");
}

#[tokio::test]
async fn waiting_is_bounded_by_wait_timeout_and_max_waiters() {
    let extra = "[idempotency]\nin_flight = \"wait\"\nwait_timeout = \"400ms\"\nmax_waiters = 1\n";
    let (redis, upstream, app) = stack(extra).await;
    until_subscribed(&redis, 1).await;
    upstream.set_delay(Duration::from_millis(1500));
    let holder = tokio::spawn(app.post("cap", "{}").send());
    upstream.until_executions(1).await;
    let started = Instant::now();
    let (a, b) = tokio::join!(
        async {
            (
                read(app.post("cap", "{}").send().await.unwrap()).await,
                started.elapsed(),
            )
        },
        async {
            (
                read(app.post("cap", "{}").send().await.unwrap()).await,
                started.elapsed(),
            )
        },
    );
    let mut times: Vec<Duration> = [&a, &b]
        .iter()
        .map(|((status, headers, body), t)| {
            assert_eq!(*status, 409);
            assert_eq!(problem_code(headers, body), "idempotency_key_in_flight");
            *t
        })
        .collect();
    times.sort();
    assert!(
        times[0] < Duration::from_millis(250),
        "over the cap: 409 at once ({:?})",
        times[0]
    );
    assert!(
        times[1] >= Duration::from_millis(400),
        "the waiter waited wait_timeout ({:?})",
        times[1]
    );
    assert!(times[1] < Duration::from_millis(1200));
    holder.await.unwrap().unwrap();
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_waiter_takes_over_when_the_holder_releases() {
    let (redis, upstream, app) = stack("[idempotency]\nin_flight = \"wait\"\n").await;
    until_subscribed(&redis, 1).await;
    upstream.set_delay(Duration::from_millis(500));
    upstream.push_statuses(&[503]);
    let holder = tokio::spawn(app.post("handoff", "{}").send());
    upstream.until_executions(1).await;
    let (status, headers, _) = read(app.post("handoff", "{}").send().await.unwrap()).await;
    assert_eq!(holder.await.unwrap().unwrap().status(), 503);
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    assert_eq!(upstream.executions(), 2, "released, so the waiter ran it");
}

#[tokio::test]
async fn a_completion_that_meets_a_redis_blip_is_retried() {
    // Redis-only mode: without the retry the response would be lost and the key
    // would answer 409 until its lease ran out.
    let (redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(500));
    let first = tokio::spawn(app.post("blip", "{}").send());
    // Real time: the pause (450 ms) must cover the completion, due at 500 ms, and end
    // before the silence could count as an outage (twice the command timeout).
    tokio::time::sleep(Duration::from_millis(450)).await;
    let admin = redis.client().await;
    let _: fred::prelude::Value = fred::prelude::ClientLike::custom(
        &admin,
        fred::cmd!("CLIENT"),
        vec!["PAUSE", "450", "WRITE"],
    )
    .await
    .unwrap();
    let (status, _, body) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    let (_, headers, again) = read(app.post("blip", "{}").send().await.unwrap()).await;
    assert_eq!(
        headers["idempotent-replayed"], "true",
        "stored despite the blip"
    );
    assert_eq!(again, body);
    assert_eq!(upstream.executions(), 1);
}
