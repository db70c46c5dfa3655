//! Callers that go away mid-claim or mid-wait leave nothing behind; a holder
//! that lost its lease answers with the key's outcome; a replay cache whose invalidation
//! feed reconnected starts empty. Real Redis, real hang-ups.

use std::time::Duration;

use bytesize::ByteSize;
use fred::prelude::{ClientLike, SortedSetsInterface};
use futures_util::future::join_all;

use crate::support::{config, eventually, problem_code, read, stack, MockUpstream, RedisServer};
use crate::support::{replays_within, tally, TestApp};

/// With the claim script paused in Redis, a client that times out must not
/// strand the claim that lands afterwards: a retry after the pause runs, with no 409.
#[tokio::test]
async fn a_caller_that_gives_up_during_a_slow_claim_leaves_no_lease() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    // Longer than the client waits, so the claim is still on its way when it leaves.
    cfg.redis.command_timeout = Duration::from_secs(3);
    let app = TestApp::spawn(cfg).await;

    // Scripts loaded (as in any running fleet), so the claim is one EVALSHA in flight.
    assert_eq!(app.post("warm", "{}").send().await.unwrap().status(), 201);
    redis.cli(&["CLIENT", "PAUSE", "1500", "WRITE"]);
    let gave_up = app
        .post("cancel-2", "{}")
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client timed out during the claim");
    assert!(
        released(&redis, "cancel-2").await,
        "the claim did not land after the pause, or was not released"
    );

    let (status, headers, _) = read(app.post("cancel-2", "{}").send().await.unwrap()).await;
    assert_eq!(
        status, 201,
        "the retry runs: the abandoned claim was released, not left to expire"
    );
    assert_eq!(headers["idempotent-replayed"], "false");
    assert_eq!(
        upstream.executions(),
        2,
        "only the retry reached the upstream"
    );
}

/// Waits (up to 10 s) until a claim of `key` was made, and released: its fencing
/// counter is there, its record is not.
async fn released(redis: &RedisServer, key: &str) -> bool {
    let record = crate::redis::record_key(key);
    eventually(Duration::from_secs(10), async || {
        let keys = redis.keys().await;
        keys.contains(&format!("{record}:n")) && !keys.contains(&record)
    })
    .await
}

/// Concurrency: many callers that give up mid-claim at once, then their retries all
/// together: one execution, every other answer a 409 or a replay of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_callers_giving_up_mid_claim_then_retrying_execute_once() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.redis.command_timeout = Duration::from_secs(3);
    let app = TestApp::spawn(cfg).await;
    upstream.set_delay(Duration::from_millis(200));

    assert_eq!(app.post("warm", "{}").send().await.unwrap().status(), 201);
    redis.cli(&["CLIENT", "PAUSE", "1000", "WRITE"]);
    let quitters = (0..20).map(|_| {
        (app.post("hot", r#"{"n":1}"#))
            .timeout(Duration::from_millis(200))
            .send()
    });
    assert!(join_all(quitters).await.iter().all(Result::is_err));
    assert!(
        released(&redis, "hot").await,
        "no claim landed and was released"
    );
    let retries = join_all(
        (0..20).map(|_| async { read(app.post("hot", r#"{"n":1}"#).send().await.unwrap()).await }),
    )
    .await;
    let t = tally(&retries);
    assert_eq!(upstream.executions(), 2, "one execution for the key");
    assert_eq!(t.first + t.in_flight + t.replayed, 20);
    assert!(t.first <= 1);
    let settled = replays_within(&app, "hot", r#"{"n":1}"#, Duration::from_secs(5)).await;
    assert!(settled, "the key settles into a replay");
    assert_eq!(upstream.executions(), 2);
}

/// How many duplicates wait on any record, fleet-wide.
async fn waiting(redis: &RedisServer) -> u64 {
    let client = redis.client().await;
    let mut total = 0;
    for key in redis.keys().await.iter().filter(|k| k.ends_with(":ws")) {
        total += client.zcard::<u64, _>(key.as_str()).await.unwrap();
    }
    let _ = client.quit().await;
    total
}

/// Impatient duplicates that hang up while waiting give their places back, so
/// a hot key never ends up refusing every waiter while nobody waits.
#[tokio::test]
async fn impatient_waiters_give_their_places_back() {
    let (redis, upstream, app) =
        stack("[idempotency]\nin_flight = \"wait\"\nmax_waiters = 3\nwait_timeout = \"10s\"\n")
            .await;
    upstream.set_delay(Duration::from_millis(2500));
    let holder = tokio::spawn(app.post("hot", "{}").send());
    upstream.until_executions(1).await;
    for _ in 0..8 {
        let quit = (app.post("hot", "{}"))
            .timeout(Duration::from_millis(150))
            .send()
            .await;
        assert!(quit.is_err(), "a waiter, not an instant 409");
    }
    let emptied = eventually(Duration::from_secs(1), async || waiting(&redis).await == 0).await;
    assert!(emptied, "every place was given back");

    // A patient duplicate still gets to wait, and gets the holder's response.
    let (status, headers, _) = read(app.post("hot", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201, "the patient duplicate waited for the holder");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(holder.await.unwrap().unwrap().status(), 201);
    assert_eq!(upstream.executions(), 1);
    assert_eq!(waiting(&redis).await, 0, "nothing left waiting");
}

/// A holder whose lease ran out while the takeover is still running answers
/// with a problem naming the other execution, not with a 2xx nobody stored.
#[tokio::test]
async fn a_holder_that_lost_its_lease_to_a_running_takeover_answers_superseded() {
    let (redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(1000));
    let late = tokio::spawn(app.post("lost", "{}").send());
    upstream.until_executions(1).await;
    let client = redis.client().await;
    for key in redis.records().await {
        let _: i64 = fred::prelude::KeysInterface::del(&client, key)
            .await
            .unwrap();
    }
    upstream.set_delay(Duration::from_millis(2500));
    let takeover = tokio::spawn(app.post("lost", "{}").send());

    let (status, headers, body) = read(late.await.unwrap().unwrap()).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (409, "idempotency_outcome_superseded")
    );
    assert!(headers.contains_key("retry-after"));
    let (s2, h2, b2) = read(takeover.await.unwrap().unwrap()).await;
    assert_eq!(
        (s2, &h2["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    let (_, h3, b3) = read(app.post("lost", "{}").send().await.unwrap()).await;
    assert_eq!(h3["idempotent-replayed"], "true");
    assert_eq!(b3, b2, "retries get the takeover's response");
}

/// Invalidations published while the subscription was down are never heard;
/// after it reconnects, the replay cache starts empty.
#[tokio::test]
async fn the_replay_cache_is_emptied_when_its_invalidation_feed_reconnects() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.replay_cache.max_bytes = ByteSize::mib(1);
    let app = TestApp::spawn(cfg).await;
    assert_eq!(app.post("k", "{}").send().await.unwrap().status(), 201);
    let replay = app.post("k", "{}").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    // An invalidation nobody heard: the record goes, and the feed drops.
    let client = redis.client().await;
    for key in redis.records().await {
        let _: i64 = fred::prelude::KeysInterface::del(&client, key)
            .await
            .unwrap();
    }
    let pubsub = |redis: &RedisServer| redis.cli(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    let subscribed = eventually(Duration::from_secs(5), async || {
        pubsub(&redis).contains("psub=1")
    })
    .await;
    assert!(
        subscribed,
        "the replica subscribes: {}",
        redis.cli(&["CLIENT", "LIST"])
    );
    let (before, view) = (pubsub(&redis), app.replay_view());
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let back = eventually(Duration::from_secs(5), async || {
        let now = pubsub(&redis);
        now.contains("psub=1") && now != before
    })
    .await;
    assert!(back, "the subscription reconnects");
    let emptied = eventually(Duration::from_secs(5), async || app.replay_view() > view);
    assert!(
        emptied.await,
        "the replay cache was not emptied on the reconnection"
    );

    let (status, headers, _) = read(app.post("k", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(
        headers["idempotent-replayed"], "false",
        "served from Redis (where the record is gone), not from a stale memory"
    );
    assert_eq!(upstream.executions(), 2);
}
