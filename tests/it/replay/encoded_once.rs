//! A first execution's response is encoded once, and that one encoding is what
//! every tier keeps. Under concurrent duplicates of many keys across two replicas: one
//! execution per key, and replays from the replay cache, from Redis and from Postgres
//! (Redis restarted empty) are byte-identical to each key's first answer.

use std::time::Duration;

use futures_util::future::join_all;

use crate::support::{comparable, durable_stack, eventually, read};
use crate::support::{config, Answer, TestApp};

/// What a replay must reproduce: status, headers in order, body.
type Replayable = (u16, Vec<(String, Vec<u8>)>, Vec<u8>);

/// Status, headers (without `Set-Cookie`, which is not replayed) and body.
fn replayable((status, headers, body): &Answer) -> Replayable {
    let headers = comparable(headers)
        .into_iter()
        .filter(|(n, _)| n != "set-cookie")
        .collect();
    (*status, headers, body.to_vec())
}

fn is_replay(answer: &Answer) -> bool {
    answer
        .1
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tier_replays_each_keys_first_answer_under_concurrency() {
    // The test replica has no replay cache: its replays are Redis's.
    let (mut redis, pg, upstream, uncached) = durable_stack("claims = \"redis\"", "").await;
    // A second replica on the same stores with a replay cache.
    let mut cfg = config(
        &redis.url(),
        &upstream.url(),
        &pg.section("claims = \"redis\""),
    );
    cfg.replay_cache.max_bytes = bytesize::ByteSize::mib(1);
    let cached = TestApp::spawn(cfg).await;
    upstream.set_delay(Duration::from_millis(50));
    let body = |i: usize| format!(r#"{{"amount":{i}}}"#);
    let (apps, keys) = ([&cached, &uncached], 16);
    let sends = (0..keys * 4).map(|n| {
        let (i, app) = (n % keys, apps[n / keys % 2]);
        async move {
            (
                i,
                read(app.post(&format!("k-{i}"), &body(i)).send().await.unwrap()).await,
            )
        }
    });
    let answers = join_all(sends).await;
    assert_eq!(upstream.executions(), keys, "one execution per key");

    let mut firsts = Vec::new();
    for i in 0..keys {
        let mine: Vec<&Answer> = (answers.iter())
            .filter(|(k, _)| *k == i)
            .map(|(_, a)| a)
            .collect();
        let executed: Vec<&&Answer> = mine
            .iter()
            .filter(|a| a.0 == 201 && !is_replay(a))
            .collect();
        assert_eq!(executed.len(), 1, "key {i}: one first answer");
        for a in &mine {
            assert!(a.0 == 409 || a.0 == 201, "key {i}: {}", a.0);
            if is_replay(a) {
                assert_eq!(replayable(a), replayable(executed[0]), "key {i}");
            }
        }
        firsts.push(replayable(executed[0]));
    }
    let replay_all = |app: &'static str| {
        let app = if app == "cached" { &cached } else { &uncached };
        join_all((0..keys).map(move |i| async move {
            read(app.post(&format!("k-{i}"), &body(i)).send().await.unwrap()).await
        }))
    };
    // The replay cache (cached replica), then Redis (uncached replica).
    for tier in ["cached", "uncached"] {
        for (i, a) in replay_all(tier).await.iter().enumerate() {
            assert!(is_replay(a), "{tier} key {i}");
            assert_eq!(replayable(a), firsts[i], "{tier} key {i}");
        }
    }
    // Postgres: Redis restarted empty, the uncached replica looks every key up.
    redis.restart();
    let ready = eventually(Duration::from_secs(10), async || {
        uncached.readyz().await.status() == 200
    });
    assert!(ready.await);
    for (i, a) in replay_all("uncached").await.iter().enumerate() {
        assert!(is_replay(a), "postgres key {i}: {}", a.0);
        assert_eq!(replayable(a), firsts[i], "postgres key {i}");
    }
    assert_eq!(upstream.executions(), keys);
}
