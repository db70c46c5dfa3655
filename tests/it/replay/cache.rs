//! The in-process replay cache: replays from memory, byte for byte, per tenant, expiring
//! with the record, and dropped on every replica by an admin invalidation.

use std::time::Duration;

use bytesize::ByteSize;

use crate::support::{comparable, config, eventually, problem_code, read, until_subscribed};
use crate::support::{MockUpstream, RedisServer, TestApp};

async fn cached(redis: &RedisServer, upstream: &MockUpstream, extra: &str) -> TestApp {
    let mut cfg = config(&redis.url(), &upstream.url(), extra);
    cfg.replay_cache.max_bytes = ByteSize::mib(1);
    TestApp::spawn(cfg).await
}

#[tokio::test]
async fn replays_come_from_memory_byte_for_byte_and_per_tenant() {
    let mut redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let app = cached(&redis, &upstream, "").await;
    let alice = |body: &'static str| app.post("k", body).header("Authorization", "alice").send();
    let (s1, h1, b1) = read(alice("{\"a\":1}").await.unwrap()).await;
    assert_eq!(s1, 201);
    redis.stop(); // from here on, only memory can answer
    let (s2, h2, b2) = read(alice("{ \"a\": 1 }").await.unwrap()).await;
    assert_eq!(
        (s2, &h2["idempotent-replayed"]),
        (201, &"true".parse().unwrap())
    );
    assert_eq!(comparable(&h2), comparable(&h1));
    assert_eq!(b2, b1);
    let (s3, h3, b3) = read(alice("{\"a\":2}").await.unwrap()).await;
    assert_eq!(
        (s3, problem_code(&h3, &b3).as_str()),
        (422, "idempotency_key_reused")
    );
    let bob = app
        .post("k", "{\"a\":1}")
        .header("Authorization", "bob")
        .send()
        .await
        .unwrap();
    assert_eq!(
        bob.status(),
        503,
        "another tenant's key is not in memory: it needs redis"
    );
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn entries_expire_with_their_record() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let app = cached(
        &redis,
        &upstream,
        "[idempotency]\nttl = \"1s\"\nlock_ttl = \"900ms\"\n",
    )
    .await;
    let first = app.post("short", "{}").send().await.unwrap();
    let expires = first.headers()["idempotency-expires"].to_str().unwrap();
    let expires = httpdate::parse_http_date(expires).unwrap();
    let r = app.post("short", "{}").send().await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    // The ttl rounded up to the whole second the answers advertise.
    let left = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(left <= Duration::from_secs(2), "{left:?}");
    tokio::time::sleep(left + Duration::from_millis(200)).await; // real time: the ttl runs out
    let r = app.post("short", "{}").send().await.unwrap();
    assert_eq!(
        r.headers()["idempotent-replayed"],
        "false",
        "expired in memory too"
    );
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn an_admin_invalidation_reaches_every_replicas_cache() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let token = "cache-test-admin-token-42";
    let extra = format!("[admin]\ntoken = \"{token}\"\n");
    let one = cached(&redis, &upstream, &extra).await;
    let two = cached(&redis, &upstream, &extra).await;
    until_subscribed(&redis, 2).await;
    one.post("inv", "{}").send().await.unwrap();
    let r = two.post("inv", "{}").send().await.unwrap(); // now cached on both
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    let url = format!("http://{}/admin/keys/payments/inv", one.admin);
    let deleted = one
        .client
        .delete(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let dropped = async || !one.caches("inv") && !two.caches("inv");
    let heard = eventually(Duration::from_secs(5), dropped).await;
    assert!(heard, "a replica's cache kept the invalidated record");
    let (_, h1, b1) = read(one.post("inv", "{}").send().await.unwrap()).await;
    assert_eq!(
        h1["idempotent-replayed"], "false",
        "invalidated, so it ran again"
    );
    let (_, h2, b2) = read(two.post("inv", "{}").send().await.unwrap()).await;
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(
        b2, b1,
        "the other replica replays the new execution, not its stale copy"
    );
    assert_eq!(upstream.executions(), 2, "ran once more, then replayed");
}
