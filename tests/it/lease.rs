//! Leases: expiry and takeover, re-sent scripts, and detachment from the client.

use std::time::Duration;

use fred::prelude::{LuaInterface, Value};

use crate::support::{config, read, MockUpstream, RedisServer, TestApp};

#[tokio::test]
async fn expired_lease_lets_a_retry_run_and_the_late_completion_does_not_overwrite() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    // Validation would refuse a lease shorter than the upstream timeout; bypass it to
    // force the expiry the validation exists to prevent.
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.routes[0].idempotency.lock_ttl = Some(Duration::from_millis(300));
    let app = TestApp::spawn(cfg).await;
    upstream.set_delay(Duration::from_millis(1000));

    let late = tokio::spawn(app.post("takeover", "{}").send());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The retry is quick: it completes while the first holder is still at work.
    upstream.set_delay(Duration::ZERO);
    let (s2, h2, b2) = read(app.post("takeover", "{}").send().await.unwrap()).await;
    let (s1, h1, b1) = read(late.await.unwrap().unwrap()).await;
    assert_eq!((s1, s2), (201, 201));
    assert_eq!(h1["idempotent-replayed"], "false");
    assert_eq!(h2["idempotent-replayed"], "false");
    assert_eq!(
        upstream.executions(),
        2,
        "the lease had expired, so the retry ran"
    );
    assert_ne!(b1, b2);

    // The first holder finished last, having lost its lease: the store keeps the second.
    let (_, h3, b3) = read(app.post("takeover", "{}").send().await.unwrap()).await;
    assert_eq!(h3["idempotent-replayed"], "true");
    assert_eq!(
        b3, b2,
        "the late completion must not overwrite the holder's response"
    );
}

#[tokio::test]
async fn a_late_completion_is_stored_when_nobody_took_the_key_over() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.routes[0].idempotency.lock_ttl = Some(Duration::from_millis(300));
    let app = TestApp::spawn(cfg).await;
    upstream.set_delay(Duration::from_millis(800));
    let (status, _, first) = read(app.post("late", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    let (_, headers, again) = read(app.post("late", "{}").send().await.unwrap()).await;
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, first);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn scripts_are_safe_to_resend_with_the_same_token() {
    let redis = RedisServer::start();
    let client = redis.client().await;
    let claim = include_str!("../../lua/claim.lua");
    let complete = include_str!("../../lua/complete.lua");
    let release = include_str!("../../lua/release.lua");
    let tag = |v: &Value| match v {
        Value::Array(items) => items[0].as_string().unwrap(),
        other => panic!("{other:?}"),
    };
    let args = vec!["fp", "token-1", "5000"];
    let a: Value = client.eval(claim, "rec", args.clone()).await.unwrap();
    let b: Value = client.eval(claim, "rec", args.clone()).await.unwrap();
    assert_eq!(
        (tag(&a), tag(&b)),
        ("A".into(), "A".into()),
        "own token: still acquired"
    );
    let other: Value = client
        .eval(claim, "rec", vec!["fp", "token-2", "5000"])
        .await
        .unwrap();
    assert_eq!(tag(&other), "I");

    let done = vec!["token-1", "resp", "5000", "fp"];
    let c1: i64 = client.eval(complete, "rec", done.clone()).await.unwrap();
    let c2: i64 = client.eval(complete, "rec", done).await.unwrap();
    assert_eq!((c1, c2), (1, 1));
    let stolen: i64 = client
        .eval(complete, "rec", vec!["token-2", "other", "5000", "fp"])
        .await
        .unwrap();
    assert_eq!(stolen, 0, "another token cannot overwrite");
    let replay: Value = client
        .eval(claim, "rec", vec!["fp", "token-3", "5000"])
        .await
        .unwrap();
    assert_eq!(replay, Value::Array(vec!["C".into(), "resp".into()]));

    let _: Value = client
        .eval(claim, "rec2", vec!["fp", "t", "5000"])
        .await
        .unwrap();
    let r1: i64 = client.eval(release, "rec2", vec!["t"]).await.unwrap();
    let r2: i64 = client.eval(release, "rec2", vec!["t"]).await.unwrap();
    assert_eq!((r1, r2), (1, 1));
    let not_ours: i64 = client.eval(release, "rec", vec!["token-1"]).await.unwrap();
    assert_eq!(not_ours, 0, "a completed record is never released");
}

#[tokio::test]
async fn client_disconnecting_before_the_upstream_answers_still_stores() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), "")).await;
    upstream.set_delay(Duration::from_millis(600));
    let gone = app
        .post("hangup", "{}")
        .timeout(Duration::from_millis(150))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(upstream.executions(), 1);
    let (status, headers, body) = read(app.post("hangup", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert!(String::from_utf8_lossy(&body).contains("\"execution\":1"));
    assert_eq!(upstream.executions(), 1);
}
