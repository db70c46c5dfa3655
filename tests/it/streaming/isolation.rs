//! What a live stream shares, and with whom: a duplicate of another tenant never joins
//! it (it runs its own execution); under `[encryption]` the Redis Stream joiners read
//! holds no plaintext of the answer (and without it, the same check finds it: the
//! check can see); and joining works the same on a Redis Cluster, the stream in the
//! record's hash slot.

use std::time::Duration;

use idemgate::config::RedisMode;
use idemgate_fleet::RedisCluster;

use super::{
    base, config, post, replicas, sse_route, upstream_sent, End, Knobs, Streamed, KNOBS, WAIT,
};
use crate::support::{RedisServer, SseUpstream, TestApp};

const WITHIN: Duration = Duration::from_secs(20);
const QUERY: &str = "events=10&gap_ms=250";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_another_tenant_runs_its_own_and_never_joins() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let route = format!(
        "{}anonymous = \"reject\"\nscope_headers = [\"x-tenant-id\"]\n",
        sse_route(&upstream)
    );
    let (one, two) = replicas(&redis, &route, KNOBS).await;
    let http = reqwest::Client::new();
    let as_tenant = |app: &TestApp, tenant: &str| {
        post(&http, &base(app), "shared-key", QUERY).header("x-tenant-id", tenant)
    };
    let first = tokio::spawn(Streamed::whole(as_tenant(&one, "a"), WITHIN));
    upstream_sent(&upstream, "shared-key", 3).await;
    let (same, other) = tokio::join!(
        Streamed::whole(as_tenant(&two, "a"), WITHIN),
        Streamed::whole(as_tenant(&two, "b"), WITHIN),
    );
    let first = first.await.unwrap();
    let runs = upstream.of("shared-key");
    assert_eq!(runs.len(), 2, "one execution per tenant");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.body == runs[0].body());
    // Tenant a's duplicate joins tenant a's stream.
    assert_eq!(same.header("idempotent-replayed"), Some("true"));
    assert!(same.body == first.body);
    // Tenant b's gets none of it: its own execution, from the start.
    assert_eq!(other.status, 200);
    assert_eq!(other.header("idempotent-replayed"), Some("false"));
    assert_eq!(other.header("x-stream-id"), Some(runs[1].id.as_str()));
    assert!(other.body == runs[1].body());
}

/// A key file for `[encryption]` in `dir`: an `[encryption]` table using it.
fn encryption(dir: &std::path::Path) -> String {
    let key: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key);
    let file = dir.join("k1");
    std::fs::write(&file, format!("{text}\n")).unwrap();
    format!(
        "[encryption]\nkeys = [{{ id = \"k1\", key_file = \"{}\" }}]\nactive = \"k1\"\n",
        file.display()
    )
}

/// Runs a stream of `key` on `one` with a joiner on `two`; once the joiner has read
/// four events, the raw entries of the key's Redis Stream; then both bodies, equal.
async fn live_entries(
    redis: &RedisServer,
    upstream: &SseUpstream,
    (one, two): (&TestApp, &TestApp),
    key: &str,
) -> String {
    let live = async || -> Vec<String> {
        (redis.keys().await.into_iter())
            .filter(|k| k.ends_with(":live"))
            .collect()
    };
    // An earlier key's stream outlives it by `lock_ttl`.
    let before = live().await;
    let http = reqwest::Client::new();
    let first = tokio::spawn(Streamed::whole(post(&http, &base(one), key, QUERY), WITHIN));
    upstream_sent(upstream, key, 2).await;
    let mut joiner = Streamed::open(post(&http, &base(two), key, QUERY), WITHIN).await;
    joiner.read(4, WITHIN).await;
    let streams: Vec<String> = (live().await.into_iter())
        .filter(|k| !before.contains(k))
        .collect();
    assert_eq!(streams.len(), 1, "one live stream: {streams:?}");
    let entries = redis.cli(&["XRANGE", &streams[0], "-", "+"]);
    joiner.finish(WITHIN).await;
    let first = first.await.unwrap();
    assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
    assert!(joiner.end == End::Clean && joiner.body == first.body);
    assert!(first.body == upstream.first_of(key).body());
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_encryption_the_live_stream_in_redis_holds_no_plaintext() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let route = sse_route(&upstream);

    // Without encryption the entries hold the events as sent: the check sees them.
    let (one, two) = replicas(&redis, &route, KNOBS).await;
    let plain = live_entries(&redis, &upstream, (&one, &two), "plain").await;
    let id = upstream.first_of("plain").id;
    assert!(
        plain.contains("event: tick") && plain.contains(&id),
        "{plain}"
    );
    drop((one, two));

    let sealed = format!("{WAIT}{}", encryption(dir.path()));
    let knobs = Knobs {
        route: &sealed,
        ..KNOBS
    };
    let (one, two) = replicas(&redis, &route, knobs).await;
    let entries = live_entries(&redis, &upstream, (&one, &two), "sealed").await;
    let id = upstream.first_of("sealed").id;
    assert!(entries.len() > 1000, "entries were written: {entries:?}");
    for plaintext in [
        "event: tick",
        "\"stream\"",
        id.as_str(),
        "text/event-stream",
    ] {
        assert!(
            !entries.contains(plaintext),
            "{plaintext} in Redis: {entries}"
        );
    }
    assert_eq!(upstream.executions_of("sealed"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_duplicate_on_another_replica_joins() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = SseUpstream::start().await;
    let mut cfg = config("redis://127.0.0.1:1", &sse_route(&upstream), KNOBS);
    cfg.redis.mode = RedisMode::Cluster;
    cfg.redis.nodes = cluster.seed_urls();
    let one = TestApp::spawn(cfg.clone()).await;
    let two = TestApp::spawn(cfg).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let http = reqwest::Client::new();
    let first = tokio::spawn(Streamed::whole(
        post(&http, &base(&one), "sharded", QUERY),
        WITHIN,
    ));
    upstream_sent(&upstream, "sharded", 3).await;
    let joined = std::time::Instant::now();
    let joiner = Streamed::whole(post(&http, &base(&two), "sharded", QUERY), WITHIN).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("sharded");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert_eq!(
        joiner.status,
        200,
        "{}",
        String::from_utf8_lossy(&joiner.body)
    );
    assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
    assert!(joiner.end == End::Clean && joiner.body == first.body);
    assert!(first.body == ran.body());
    let so_far = joiner.events_at[2];
    assert!(
        super::since(so_far, joined) < Duration::from_millis(500),
        "the recorded events came {:?} after the joiner",
        super::since(so_far, joined)
    );
    assert!(so_far < *ran.sent.last().unwrap(), "joined live");
    assert_eq!(upstream.executions_of("sharded"), 1);
}
