//! The request kept for the completer: sealed at rest under `[encryption]`
//! and cleared when its record completes; and carried by the write-through claim's own
//! statement, so that keeping it costs a first execution no extra Postgres write.

use std::time::Duration;

use super::{extra, stores, INTERVAL};
use crate::support::{config, eventually, read, MockUpstream, PgServer, RedisServer, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kept_request_is_sealed_and_cleared_on_completion() {
    let (redis, pg, up) = stores(Duration::from_millis(800)).await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("k1");
    std::fs::write(
        &key_file,
        format!("{}\n", "MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE="),
    )
    .unwrap();
    let sealed = format!(
        "{}[encryption]\nkeys = [{{ id = \"k1\", key_file = \"{}\" }}]\nactive = \"k1\"\n",
        extra(&pg, true, INTERVAL),
        key_file.display()
    );
    let app = TestApp::spawn(config(&redis.url(), &up.url(), &sealed)).await;
    let (key, body) = ("sealed-raw-key-42", "{\"card\":\"4111111111111111\"}");
    let request = app
        .post(key, body)
        .header("Authorization", "Bearer tenant-secret");
    let answer = tokio::spawn(async move { request.send().await.unwrap().status() });
    let client = pg.client().await;
    let mut kept: Option<Vec<u8>> = None;
    let sql = "SELECT request FROM idemgate_records WHERE request IS NOT NULL";
    eventually(Duration::from_secs(5), async || {
        kept = (client.query_opt(sql, &[]).await.unwrap()).map(|row| row.get(0));
        kept.is_some()
    })
    .await;
    let kept = kept.expect("the lease keeps the request while it runs");
    assert_eq!(kept[0], 2, "sealed envelope");
    for secret in [key.as_bytes(), b"4111111111111111", b"tenant-secret"] {
        assert!(
            !kept.windows(secret.len()).any(|w| w == secret),
            "plaintext at rest"
        );
    }
    assert_eq!(answer.await.unwrap(), 201);
    assert_eq!(
        pg.count("request IS NOT NULL").await,
        0,
        "cleared on completion"
    );
    assert_eq!(
        pg.count("state = 'completed' AND completer IS NULL").await,
        1
    );
}

/// Transaction ids Postgres has handed out so far: one per transaction that wrote (a
/// claim statement, a completion), whatever session ran it; reading takes one too.
async fn xids(pg: &PgServer) -> i64 {
    let client = pg.client().await;
    let row = client
        .query_one("SELECT pg_current_xact_id()::text::bigint", &[])
        .await
        .unwrap();
    row.get(0)
}

/// The resendable request travels in the write-through claim's own statement: first
/// executions with the completer on write in as many Postgres transactions as with it
/// off (a claim and a completion each). Prints both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keeping_the_request_costs_no_extra_postgres_round_trip() {
    const N: usize = 40;
    let (redis, pg, up) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let hour = Duration::from_secs(3600);
    let mut measured = Vec::new();
    for completer in [false, true] {
        let app = TestApp::spawn(config(
            &redis.url(),
            &up.url(),
            &extra(&pg, completer, hour),
        ))
        .await;
        // Warm: connections made, statements prepared.
        let body = "{\"amount\":10}".repeat(20);
        read(
            app.post(&format!("warm-{completer}"), &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        let before = xids(&pg).await;
        for i in 0..N {
            let key = format!("cost-{completer}-{i}");
            let (status, ..) = read(app.post(&key, &body).send().await.unwrap()).await;
            assert_eq!(status, 201);
        }
        // Completions are written through before the answer: all are in.
        let after = xids(&pg).await;
        measured.push((completer, after - before - 1));
    }
    eprintln!("postgres writing transactions for {N} first executions: {measured:?}");
    let (off, on) = (measured[0].1, measured[1].1);
    assert_eq!(off, 2 * N as i64, "a claim and a completion each");
    assert_eq!(on, off, "completer on: {on} transactions, off: {off}");
    assert_eq!(pg.count("request IS NOT NULL").await, 0);
}
