//! Responses sealed at rest in Redis and Postgres, bound to their
//! record, with key rotation; an unreadable record answers 500
//! `stored_record_unreadable` and is never replayed (nor run again).

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use crate::support::{
    comparable, config, eventually, problem_code, read, replays_within, MockUpstream, PgServer,
    RedisServer, TestApp,
};

/// Plaintext the mock upstream puts in every response: body, header, cookie.
const PLAINTEXT: [&[u8]; 4] = [
    b"\"execution\"",
    b"x-execution",
    b"a=1",
    b"application/json",
];

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Key files `k1`, `k2` (distinct random keys) in a temp dir.
fn key_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, byte) in [("k1", b'1'), ("k2", b'2')] {
        let key: Vec<u8> = (0..32)
            .map(|i| byte.wrapping_mul(31).wrapping_add(i))
            .collect();
        let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key);
        std::fs::write(dir.path().join(name), format!("{text}\n")).unwrap();
    }
    dir
}

/// An `[encryption]` section with `ids` from `dir` and `active`.
fn encryption(dir: &Path, ids: &[&str], active: &str) -> String {
    let keys: Vec<String> = (ids.iter())
        .map(|id| {
            format!(
                "{{ id = \"{id}\", key_file = \"{}\" }}",
                dir.join(id).display()
            )
        })
        .collect();
    format!(
        "[encryption]\nkeys = [{}]\nactive = \"{active}\"\n",
        keys.join(", ")
    )
}

/// A gateway that fills Redis at completion: these tests read and alter the record each
/// tier holds right after it was stored. The default (filled on replay) is
/// `a_record_filled_on_replay_is_rewarmed_with_the_sealed_bytes_postgres_holds`.
async fn gateway(redis: &RedisServer, pg: &PgServer, up: &MockUpstream, extra: &str) -> TestApp {
    let toml = format!("{}{extra}", pg.section("redis_fill = \"at_completion\""));
    TestApp::spawn(config(&redis.url(), &up.url(), &toml)).await
}

/// The one record key in Redis.
async fn record_key(redis: &RedisServer) -> String {
    let records = redis.records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    records[0].clone()
}

async fn hget(redis: &RedisServer, key: &str) -> Bytes {
    redis.record_field(key, "r").await.unwrap()
}

async fn hset(redis: &RedisServer, key: &str, raw: Bytes) {
    redis.set_record_fields(key, &[("r", &raw)]).await;
}

/// (status, headers, body) of the one row in Postgres.
async fn row(pg: &PgServer) -> (i16, Vec<u8>, Vec<u8>) {
    let row = (pg.client().await)
        .query_one("SELECT status, headers, body FROM idemgate_records", &[])
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Asserts a 500 `stored_record_unreadable`.
async fn assert_unreadable(r: reqwest::Response) {
    let (status, headers, body) = read(r).await;
    assert_eq!(status, 500, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "stored_record_unreadable");
    assert!(headers.get("idempotent-replayed").is_none());
}

#[tokio::test]
async fn both_tiers_hold_the_same_sealed_bytes_and_replays_are_identical() {
    let (redis, pg, up, keys) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
        key_files(),
    );
    let app = gateway(&redis, &pg, &up, &encryption(keys.path(), &["k1"], "k1")).await;
    let (s1, h1, b1) = read(app.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!(s1, 201);

    let in_redis = hget(&redis, &record_key(&redis).await).await;
    let (status, headers, body) = row(&pg).await;
    for text in PLAINTEXT {
        let shown = String::from_utf8_lossy(text);
        assert!(
            !contains(&in_redis, text),
            "redis holds {shown} in the clear"
        );
        assert!(
            !contains(&body, text) && !contains(&headers, text),
            "postgres holds {shown}"
        );
    }
    assert_eq!(
        (status, headers.len()),
        (0, 0),
        "status and headers are sealed too"
    );
    assert_eq!(
        &body[..],
        &in_redis[..],
        "both tiers hold the same sealed bytes"
    );
    assert_eq!(&in_redis[..4], b"\x02\x02k1", "sealed, with its key id");

    let (s2, h2, b2) = read(app.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!((s2, &b2), (s1, &b1));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(comparable(&h2), comparable(&h1));
    assert_eq!(up.executions(), 1);
}

/// On the defaults (filled on replay), Redis gets the record from the first claim after
/// the holder's lease ran out, with the sealed bytes Postgres holds.
#[tokio::test]
async fn a_record_filled_on_replay_is_rewarmed_with_the_sealed_bytes_postgres_holds() {
    let (redis, pg, up, keys) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
        key_files(),
    );
    let sealed = encryption(keys.path(), &["k1"], "k1");
    let toml = format!(
        "[idempotency]\nlock_ttl = \"1s\"\n{}{sealed}",
        pg.section("")
    );
    let app = TestApp::spawn(config(&redis.url(), &up.url(), &toml)).await;
    let (s1, h1, b1) = read(app.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!(s1, 201);
    let key = record_key(&redis).await;
    let field = redis.record_field(&key, "r").await;
    assert!(field.is_none(), "completed in postgres alone: {field:?}");

    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (s2, h2, b2) = read(app.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!((s2, &b2, comparable(&h2)), (s1, &b1, comparable(&h1)));
    assert_eq!(h2["idempotent-replayed"], "true");
    let (_, _, body) = row(&pg).await;
    let in_redis = hget(&redis, &record_key(&redis).await).await;
    assert_eq!(&in_redis[..], &body[..], "re-warmed with the sealed bytes");
    assert_eq!(&in_redis[..4], b"\x02\x02k1", "sealed, with its key id");
    assert_eq!(up.executions(), 1);
}

#[tokio::test]
async fn a_flipped_byte_in_redis_answers_500_and_is_never_replayed() {
    let (redis, pg, up, keys) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
        key_files(),
    );
    let app = gateway(&redis, &pg, &up, &encryption(keys.path(), &["k1"], "k1")).await;
    assert_eq!(app.post("k", "{}").send().await.unwrap().status(), 201);
    let key = record_key(&redis).await;
    let mut raw = hget(&redis, &key).await.to_vec();
    let middle = raw.len() / 2;
    raw[middle] ^= 0x20;
    hset(&redis, &key, raw.into()).await;
    for _ in 0..2 {
        assert_unreadable(app.post("k", "{}").send().await.unwrap()).await;
    }
    assert_eq!(up.executions(), 1, "never run again");
    let metrics = app.metrics().await;
    let line = (metrics.lines())
        .find(|l| l.starts_with("idemgate_stored_records_unreadable_total{reason=\"forged\"}"))
        .unwrap_or_else(|| panic!("no counter: {metrics}"));
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 2.0, "{line}");
}

#[tokio::test]
async fn a_flipped_byte_in_postgres_answers_500_when_redis_is_cold() {
    let (mut redis, pg, up, keys) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
        key_files(),
    );
    let app = gateway(&redis, &pg, &up, &encryption(keys.path(), &["k1"], "k1")).await;
    assert_eq!(app.post("k", "{}").send().await.unwrap().status(), 201);
    let (_, _, body) = row(&pg).await;
    let middle = (body.len() / 2) as i32 + 1; // 1-based
    (pg.client().await)
        .execute(
            "UPDATE idemgate_records SET body = set_byte(body, $1 - 1, get_byte(body, $1 - 1) # 32)",
            &[&middle],
        )
        .await
        .unwrap();
    redis.restart();
    let answered = eventually(Duration::from_secs(10), async || {
        let r = app.post("k", "{}").send().await.unwrap();
        r.status() == 500
    })
    .await;
    assert!(answered, "redis back, the key is looked up in postgres");
    // Every retry gets the same answer: the Redis lease taken for the lookup was freed.
    for _ in 0..2 {
        assert_unreadable(app.post("k", "{}").send().await.unwrap()).await;
    }
    assert_eq!(up.executions(), 1, "never run again");
    assert!(
        redis.records().await.is_empty(),
        "nothing re-warmed or left leased"
    );
}

#[tokio::test]
async fn a_record_moved_onto_another_key_does_not_open() {
    let (redis, pg, up, keys) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
        key_files(),
    );
    let app = gateway(&redis, &pg, &up, &encryption(keys.path(), &["k1"], "k1")).await;
    assert_eq!(app.post("a", "{}").send().await.unwrap().status(), 201);
    let a = record_key(&redis).await;
    assert_eq!(app.post("b", "{}").send().await.unwrap().status(), 201);
    let b = (redis.records().await.into_iter())
        .find(|k| *k != a)
        .unwrap();
    // The same request body, so the copied fingerprint matches: only the seal can tell.
    let copied = redis.cli(&["COPY", &a, &b, "REPLACE"]);
    assert_eq!(copied.trim(), "1", "{copied}");
    assert_unreadable(app.post("b", "{}").send().await.unwrap()).await;
    let renamed = redis.cli(&["RENAME", &a, &b]);
    assert_eq!(renamed.trim(), "OK", "{renamed}");
    assert_unreadable(app.post("b", "{}").send().await.unwrap()).await;
    assert_eq!(up.executions(), 2);
}

#[tokio::test]
async fn keys_rotate_and_records_before_encryption_still_replay() {
    let (mut redis, pg, up, keys) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
        key_files(),
    );
    // Before encryption: stored unsealed.
    let app = gateway(&redis, &pg, &up, "").await;
    let (_, _, plain) = read(app.post("plain", "{}").send().await.unwrap()).await;
    assert!(contains(&row(&pg).await.2, b"\"execution\""));
    drop(app);

    // Encryption on with k1: the unsealed record still replays; new records use k1.
    let app = gateway(&redis, &pg, &up, &encryption(keys.path(), &["k1"], "k1")).await;
    let (_, h, b) = read(app.post("plain", "{}").send().await.unwrap()).await;
    assert_eq!(
        (h["idempotent-replayed"].to_str().unwrap(), &b),
        ("true", &plain)
    );
    let (_, _, under_k1) = read(app.post("old", "{}").send().await.unwrap()).await;
    drop(app);

    // k2 active, k1 kept: the k1 record replays, from Redis and from Postgres.
    let rotated = encryption(keys.path(), &["k1", "k2"], "k2");
    let app = gateway(&redis, &pg, &up, &rotated).await;
    let (_, h, b) = read(app.post("old", "{}").send().await.unwrap()).await;
    assert_eq!(
        (h["idempotent-replayed"].to_str().unwrap(), &b),
        ("true", &under_k1)
    );
    assert_eq!(app.post("new", "{}").send().await.unwrap().status(), 201);
    let ids: Vec<Vec<u8>> = ((pg.client().await)
        .query("SELECT substr(body, 3, 2) FROM idemgate_records WHERE status = 0 ORDER BY completed_at", &[])
        .await
        .unwrap()
        .iter())
    .map(|r| r.get(0))
    .collect();
    assert_eq!(
        ids,
        [b"k1".to_vec(), b"k2".to_vec()],
        "each record names its key"
    );
    redis.restart();
    let replayed = replays_within(&app, "old", "{}", Duration::from_secs(10)).await;
    assert!(replayed, "the k1 record replays from postgres under k2");
    drop(app);

    // k1 retired: its record is unreadable; without any keys, so is every sealed one.
    let app = gateway(&redis, &pg, &up, &encryption(keys.path(), &["k2"], "k2")).await;
    assert_unreadable(app.post("old", "{}").send().await.unwrap()).await;
    drop(app);
    let app = gateway(&redis, &pg, &up, "").await;
    assert_unreadable(app.post("new", "{}").send().await.unwrap()).await;
    assert_eq!(up.executions(), 3, "plain, old, new: each ran once");
}
