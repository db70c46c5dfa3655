//! Redis unreachable or slow: 503 and nothing forwarded; then recovery. Redis without its
//! scripts: they are loaded again.

use std::time::{Duration, Instant};

use fred::prelude::{ClientLike, Value};

use crate::support::{eventually, problem_code, read, stack};

#[tokio::test]
async fn redis_killed_gives_503_and_recovers_when_it_returns() {
    let (mut redis, upstream, app) = stack("").await;
    assert_eq!(app.post("before", "{}").send().await.unwrap().status(), 201);
    redis.stop();

    let (status, headers, body) = read(app.post("during", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert_eq!(problem_code(&headers, &body), "store_unavailable");
    assert!(
        headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(
        upstream.executions(),
        1,
        "an unclaimed request is never forwarded"
    );
    let ready = app.readyz().await;
    assert_eq!(ready.status(), 503);
    let v: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(v["dependencies"]["redis"]["state"], "down");

    // Back, empty, with no scripts cached: the gateway reconnects and reloads them.
    redis.restart();
    let recovered = eventually(Duration::from_secs(10), async || {
        let r = app.post("during", "{}").send().await.unwrap();
        if r.status() == 201 {
            assert_eq!(r.headers()["idempotent-replayed"], "false");
            return true;
        }
        assert_eq!(r.status(), 503);
        false
    });
    assert!(recovered.await, "gateway did not recover");
    let ready = app.readyz().await;
    assert_eq!(ready.status(), 200);
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn redis_paused_past_the_command_timeout_is_503_never_forwarded() {
    let (redis, upstream, app) = stack("").await;
    let admin = redis.client().await;
    let _: Value = admin
        .custom(fred::cmd!("CLIENT"), vec!["PAUSE", "1500", "ALL"])
        .await
        .unwrap();
    let started = Instant::now();
    let (status, headers, body) = read(app.post("paused", "{}").send().await.unwrap()).await;
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "the command timeout bounds the wait"
    );
    assert_eq!(status, 503);
    assert_eq!(problem_code(&headers, &body), "store_unavailable");
    assert_eq!(upstream.executions(), 0);
    // After the pause the claim may have landed; the gateway releases its own token,
    // and at worst the lease expires. Either way the key runs exactly once.
    let ran = eventually(Duration::from_secs(40), async || {
        match app
            .post("paused", "{}")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
        {
            201 => true,
            409 | 503 => false,
            other => panic!("unexpected {other}"),
        }
    });
    assert!(ran.await, "the key never ran");
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn healthz_is_up_whatever_redis_does() {
    let (mut redis, _upstream, app) = stack("").await;
    let url = format!("http://{}/healthz", app.admin);
    assert_eq!(app.client.get(&url).send().await.unwrap().status(), 200);
    let ready = app.readyz().await;
    assert_eq!(ready.status(), 200);
    redis.stop();
    assert_eq!(app.client.get(&url).send().await.unwrap().status(), 200);
}

/// A Redis that lost its scripts (`SCRIPT FLUSH`, as a restart or a promoted replica
/// does) while a call runs: its completion loads the script and runs again, the retry
/// replays it, and the next claim loads its own; nothing runs twice.
#[tokio::test]
async fn scripts_flushed_mid_call_are_loaded_again_by_the_completion_and_the_next_claim() {
    let (redis, upstream, app) = stack("").await;
    let admin = redis.client().await;
    upstream.set_delay(Duration::from_millis(600));
    let first = tokio::spawn(app.post("flushed", "{}").send());
    upstream.until_executions(1).await;
    let _: Value = admin
        .custom(fred::cmd!("SCRIPT"), vec!["FLUSH"])
        .await
        .unwrap();
    let (status, headers, body) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "false");
    upstream.set_delay(Duration::ZERO);
    let _: Value = admin
        .custom(fred::cmd!("SCRIPT"), vec!["FLUSH"])
        .await
        .unwrap();
    let (status, headers, again) = read(app.post("flushed", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"true".parse().unwrap())
    );
    assert_eq!(again, body, "the stored answer, byte for byte");
    let next = app.post("after-flush", "{}").send().await.unwrap();
    assert_eq!(next.status(), 201);
    assert_eq!(upstream.executions(), 2, "each key ran once");
}
