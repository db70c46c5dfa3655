//! The basics of a key: its scope and fingerprint, the replay, and a mismatch.

use crate::support::{comparable, keyed_post, problem_code, read, stack};

#[tokio::test]
async fn replay_is_byte_identical_including_headers() {
    let (_redis, upstream, app) = stack("").await;
    let (s1, h1, b1) = read(app.post("pay-1", r#"{"amount":100}"#).send().await.unwrap()).await;
    assert_eq!(s1, 201);
    assert_eq!(h1["idempotent-replayed"], "false");
    assert!(
        h1.get("x-hop").is_none(),
        "hop-by-hop headers are not passed on"
    );
    for _ in 0..3 {
        let (s2, h2, b2) = read(app.post("pay-1", r#"{"amount":100}"#).send().await.unwrap()).await;
        assert_eq!(s2, s1);
        assert_eq!(h2["idempotent-replayed"], "true");
        assert_eq!(comparable(&h2), comparable(&h1));
        assert_eq!(b2, b1);
    }
    assert_eq!(h1.get_all("set-cookie").iter().count(), 2);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn reordered_json_keys_replay() {
    let (_redis, upstream, app) = stack("").await;
    app.post("json", r#"{"a":1,"b":{"c":2,"d":3}}"#)
        .send()
        .await
        .unwrap();
    let r = app
        .post("json", "{ \"b\": {\"d\":3, \"c\":2}, \"a\": 1 }\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn same_key_different_request_is_a_mismatch() {
    let (_redis, upstream, app) = stack("").await;
    app.post("reuse", r#"{"amount":100}"#).send().await.unwrap();
    let (status, headers, body) =
        read(app.post("reuse", r#"{"amount":999}"#).send().await.unwrap()).await;
    assert_eq!(status, 422);
    assert_eq!(problem_code(&headers, &body), "idempotency_key_reused");
    // Another path under the same route with the same key is also a different request.
    let r = keyed_post(
        &app.client,
        app.url("/v1/refunds"),
        "reuse",
        r#"{"amount":100}"#,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn mismatch_status_is_configurable() {
    let (_redis, _upstream, app) = stack("[idempotency]\nmismatch_status = 409\n").await;
    app.post("reuse", "{\"a\":1}").send().await.unwrap();
    let (status, headers, body) = read(app.post("reuse", "{\"a\":2}").send().await.unwrap()).await;
    assert_eq!(status, 409);
    assert_eq!(problem_code(&headers, &body), "idempotency_key_reused");
}

#[tokio::test]
async fn tenants_with_the_same_key_are_independent() {
    let (_redis, upstream, app) = stack("").await;
    let send = |tenant: &'static str| {
        app.post("shared-key", r#"{"amount":1}"#)
            .header("Authorization", tenant)
            .send()
    };
    let (_, _, alice) = read(send("Bearer alice").await.unwrap()).await;
    let (_, hb, bob) = read(send("Bearer bob").await.unwrap()).await;
    assert_eq!(
        hb["idempotent-replayed"], "false",
        "bob must not get alice's response"
    );
    assert_ne!(alice, bob);
    let (_, ha2, alice2) = read(send("Bearer alice").await.unwrap()).await;
    assert_eq!(ha2["idempotent-replayed"], "true");
    assert_eq!(alice2, alice);
    // No scope header at all is its own tenant ("anonymous").
    let r = app
        .post("shared-key", r#"{"amount":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "false");
    assert_eq!(upstream.executions(), 3);
}

#[tokio::test]
async fn redis_keys_are_hashed_and_hash_tagged() {
    let (redis, upstream, app) = stack("").await;
    app.post("customer-42@example.com", "{}")
        .send()
        .await
        .unwrap();
    let keys = redis.records().await;
    assert_eq!(keys.len(), 1);
    let key = &keys[0];
    assert!(
        redis.keys().await.contains(&format!("{key}:n")),
        "fence key in the same slot"
    );
    assert!(
        !key.contains("customer-42"),
        "raw key leaked into Redis: {key}"
    );
    let tag = key
        .strip_prefix("idemgate:{")
        .and_then(|k| k.strip_suffix('}'))
        .expect(key);
    assert_eq!(tag.len(), 64);
    assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
    // The key travels upstream untouched, so the upstream can deduplicate too.
    let seen = &upstream.seen()[0];
    assert_eq!(seen.body, "{}", "the body is forwarded as sent");
    assert_eq!(seen.headers["idempotency-key"], "customer-42@example.com");
    assert_eq!(seen.headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(seen.headers["x-forwarded-proto"], "http");
}

#[tokio::test]
async fn stored_response_expires_after_ttl() {
    // ttl must cover the lease, and the lease the upstream timeout: all short here.
    let redis = crate::support::RedisServer::start();
    let upstream = crate::support::MockUpstream::start().await;
    let toml = format!(
        "[redis]\nurl = \"{}\"\ncommand_timeout = \"300ms\"\n[[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"500ms\"\n[routes.idempotency]\nttl = \"1s\"\nlock_ttl = \"1s\"\nanonymous = \"shared\"\n",
        redis.url(),
        upstream.url()
    );
    let app = crate::support::TestApp::spawn(idemgate::Config::from_toml(&toml).unwrap()).await;
    app.post("ttl", "{}").send().await.unwrap();
    let key = &redis.records().await[0];
    let pttl = redis.pttl(key).await;
    // The route's ttl, rounded up to the whole second `Idempotency-Expires` names.
    assert!(
        pttl > 0 && pttl <= 2000,
        "stored with the route's ttl, got {pttl} ms"
    );
    let r = app.post("ttl", "{}").send().await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    // Real time: the record's ttl runs out in Redis.
    tokio::time::sleep(std::time::Duration::from_millis(pttl as u64 + 200)).await;
    let r = app.post("ttl", "{}").send().await.unwrap();
    assert_eq!(
        r.headers()["idempotent-replayed"],
        "false",
        "expired: runs again"
    );
    assert_eq!(upstream.executions(), 2);
}
