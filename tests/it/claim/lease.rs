//! Leases: expiry and takeover, re-sent scripts, and detachment from the client.

use std::time::Duration;

use fred::prelude::{KeysInterface, LuaInterface, Value};

use crate::support::{completed_records, eventually, read, stack, RedisServer};

/// Ends a lease behind its holder's back, as its expiry would (the heartbeat keeps a
/// live holder's lease from expiring on its own).
async fn expire_lease(redis: &RedisServer) {
    let client = redis.client().await;
    for key in redis.records().await {
        let _: i64 = client.del(key).await.unwrap();
    }
}

#[tokio::test]
async fn expired_lease_lets_a_retry_run_and_the_late_completion_does_not_overwrite() {
    let (redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(1000));

    let late = tokio::spawn(app.post("takeover", "{}").send());
    upstream.until_executions(1).await;
    expire_lease(&redis).await;
    // The retry is quick: it completes while the first holder is still at work.
    upstream.set_delay(Duration::ZERO);
    let (s2, h2, b2) = read(app.post("takeover", "{}").send().await.unwrap()).await;
    let (s1, h1, b1) = read(late.await.unwrap().unwrap()).await;
    assert_eq!((s1, s2), (201, 201));
    assert_eq!(h2["idempotent-replayed"], "false");
    assert_eq!(
        upstream.executions(),
        2,
        "the lease had expired, so the retry ran"
    );
    // The holder that lost its lease answers with the key's stored
    // outcome (the takeover's), never a 2xx that disagrees with every retry.
    assert_eq!(h1["idempotent-replayed"], "true");
    assert_eq!(b1, b2, "the late holder's client gets the stored response");
    let fence = |i: usize| -> u64 {
        upstream.seen()[i].headers["idempotency-fencing-token"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        fence(1) > fence(0),
        "the takeover carries a larger fencing token"
    );

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
    let (redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(600));
    let first = tokio::spawn(app.post("late", "{}").send());
    upstream.until_executions(1).await;
    expire_lease(&redis).await;
    let (status, _, first) = read(first.await.unwrap().unwrap()).await;
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
    let claim = concat!(
        include_str!("../../../lua/record.lua"),
        include_str!("../../../lua/claim.lua")
    );
    let complete = concat!(
        include_str!("../../../lua/record.lua"),
        include_str!("../../../lua/complete.lua")
    );
    let release = concat!(
        include_str!("../../../lua/record.lua"),
        include_str!("../../../lua/release.lua")
    );
    let extend = concat!(
        include_str!("../../../lua/record.lua"),
        include_str!("../../../lua/extend.lua")
    );
    let keys = || vec!["{r}", "{r}:n", "warm-since"];
    let reply = |v: &Value| match v {
        Value::Array(items) => (
            items[0].as_string().unwrap(),
            items.get(1).and_then(Value::as_i64),
        ),
        other => panic!("{other:?}"),
    };
    let args = vec!["fp", "token-1", "5000", "60000", "0"];
    let a: Value = client.eval(claim, keys(), args.clone()).await.unwrap();
    let b: Value = client.eval(claim, keys(), args.clone()).await.unwrap();
    let (tag_a, fence_a) = reply(&a);
    assert_eq!(
        (tag_a.as_str(), reply(&b)),
        ("A", ("A".to_string(), fence_a)),
        "own token: same claim"
    );
    let other: Value = client
        .eval(claim, keys(), vec!["fp", "token-2", "5000", "60000", "0"])
        .await
        .unwrap();
    assert_eq!(reply(&other).0, "I");
    let extended: i64 = client
        .eval(extend, "{r}", vec!["token-1", "9000"])
        .await
        .unwrap();
    let not_ours: i64 = client
        .eval(extend, "{r}", vec!["token-2", "9000"])
        .await
        .unwrap();
    assert_eq!((extended, not_ours), (1, 0));

    let done = vec!["token-1", "resp", "5000", "fp", "{r}:done", "PUBLISH"];
    let c1: i64 = client.eval(complete, "{r}", done.clone()).await.unwrap();
    let c2: i64 = client.eval(complete, "{r}", done).await.unwrap();
    assert_eq!((c1, c2), (1, 1));
    let stolen: i64 = client
        .eval(
            complete,
            "{r}",
            vec!["token-2", "other", "5000", "fp", "{r}:done", "PUBLISH"],
        )
        .await
        .unwrap();
    assert_eq!(stolen, 0, "another token cannot overwrite");
    let replay: Value = client
        .eval(claim, keys(), vec!["fp", "token-3", "5000", "60000", "0"])
        .await
        .unwrap();
    let Value::Array(parts) = replay else {
        panic!("{replay:?}")
    };
    assert_eq!(parts[..2], [Value::from("C"), Value::from("resp")]);
    assert!(parts[2].as_i64().unwrap() > 0, "with the time it has left");
    let not_held: i64 = client
        .eval(release, "{r}", vec!["token-1", "{r}:done", "PUBLISH"])
        .await
        .unwrap();
    assert_eq!(not_held, 0, "a completed record is never released");

    // A new claim after the record is gone gets a larger fencing token.
    let _: i64 = client.del("{r}").await.unwrap();
    let again: Value = client
        .eval(claim, keys(), vec!["fp", "token-4", "5000", "60000", "0"])
        .await
        .unwrap();
    assert!(reply(&again).1.unwrap() > fence_a.unwrap());
    let r1: i64 = client
        .eval(release, "{r}", vec!["token-4", "{r}:done", "PUBLISH"])
        .await
        .unwrap();
    let r2: i64 = client
        .eval(release, "{r}", vec!["token-4", "{r}:done", "PUBLISH"])
        .await
        .unwrap();
    assert_eq!((r1, r2), (1, 1));
}

#[tokio::test]
async fn client_disconnecting_before_the_upstream_answers_still_stores() {
    let (redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(600));
    let gone = app
        .post("hangup", "{}")
        .timeout(Duration::from_millis(150))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up");
    let stored = eventually(Duration::from_secs(5), async || {
        completed_records(&redis).await == 1
    });
    assert!(stored.await, "the detached call never stored its answer");
    assert_eq!(upstream.executions(), 1);
    let (status, headers, body) = read(app.post("hangup", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert!(String::from_utf8_lossy(&body).contains("\"execution\":1"));
    assert_eq!(upstream.executions(), 1);
}
