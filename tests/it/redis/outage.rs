//! Redis unreachable or slow: 503 and nothing forwarded; then recovery.

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
