//! Completions of claims that wrote no row (Redis held them alone): a batch of them is
//! inserted as it is, and only when one of its keys turns out to be taken is it written
//! by the upsert, with the upsert's answers: first writer wins, an expired record gives
//! way, a lease of the same token is completed, and of racing writers one writes each key.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use idemgate::testing::store::postgres::{CompletedRecord, PgClaim};
use idemgate::testing::store::PgStore;

use crate::support::records::{completed, fingerprint, id, migrated_store, rec};
use crate::support::{PgServer, LEASE};

/// The record of `key` completed by `token` with `body`, its claim held by Redis alone.
fn new_record(key: &str, token: &str, body: &'static [u8]) -> CompletedRecord {
    CompletedRecord {
        token: token.into(),
        body: Bytes::from_static(body),
        ..completed(key, 3_600_000)
    }
}

/// `(state, lock_token, body)` of the row of `key`.
async fn row(pg: &PgServer, key: &str) -> (String, String, Option<Vec<u8>>) {
    let row = (pg.client().await)
        .query_one(
            "SELECT state, lock_token, body FROM idemgate_records WHERE key_hash = $1",
            &[&&id(key).as_bytes()[..]],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// How many times the session ran the plain insert and the upsert.
async fn runs(s: &PgStore) -> (i64, i64) {
    let plans = s.prepared_plans().await.unwrap();
    let count = |upsert: bool| {
        (plans.iter())
            .filter(|(sql, ..)| sql.starts_with("INSERT INTO idemgate_records"))
            .filter(|(sql, ..)| sql.contains("ON CONFLICT") == upsert)
            .map(|(_, generic, custom)| generic + custom)
            .sum()
    };
    (count(false), count(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_keys_are_inserted_in_one_statement_and_a_taken_one_goes_through_the_upsert() {
    let pg = PgServer::start();
    let s = migrated_store(pg.url(), 1).await;
    let batch: Vec<_> = (0..5)
        .map(|i| new_record(&format!("new-{i}"), "t", b"first"))
        .collect();
    assert_eq!(s.complete_batch(&batch).await.unwrap(), vec![true; 5]);
    assert_eq!(runs(&s).await, (1, 0), "(plain inserts, upserts)");

    // Taken by then: a live completed record (another execution's), an expired one, a
    // lease of the completing token (written back to Postgres while Redis was away).
    s.complete_batch(&[new_record("live", "other", b"theirs")])
        .await
        .unwrap();
    let expired = CompletedRecord {
        token: "gone".into(),
        ..completed("expired", 1)
    };
    s.complete_batch(&[expired]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let fp = fingerprint("");
    let leased = s.claim(rec("leased"), &fp, "mine", LEASE).await.unwrap();
    assert!(matches!(leased, PgClaim::Acquired { .. }));
    let before = runs(&s).await;

    let batch = [
        new_record("fresh-a", "mine", b"ours"),
        new_record("live", "mine", b"ours"),
        new_record("expired", "mine", b"ours"),
        new_record("leased", "mine", b"ours"),
        new_record("fresh-b", "mine", b"ours"),
    ];
    assert_eq!(
        s.complete_batch(&batch).await.unwrap(),
        [true, false, true, true, true],
        "the upsert's answers"
    );
    assert_eq!(
        runs(&s).await,
        (before.0 + 1, before.1 + 1),
        "the insert failed whole, then the upsert wrote the batch"
    );
    let theirs = ("completed".into(), "other".into(), Some(b"theirs".to_vec()));
    assert_eq!(row(&pg, "live").await, theirs, "first writer wins");
    for key in ["fresh-a", "expired", "leased", "fresh-b"] {
        let ours = ("completed".into(), "mine".into(), Some(b"ours".to_vec()));
        assert_eq!(row(&pg, key).await, ours, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_batches_of_the_same_new_keys_write_each_key_once() {
    let pg = PgServer::start();
    let s = migrated_store(pg.url(), 4).await;
    const KEYS: usize = 24;
    const WRITERS: usize = 4;
    let bodies: [&'static [u8]; WRITERS] = [b"w0", b"w1", b"w2", b"w3"];
    for round in 0..3 {
        // Each writer's batch holds every key (a takeover's completion racing the
        // original's), in its own order; complete_batch sorts, so none deadlocks.
        let batches: Vec<Vec<CompletedRecord>> = (0..WRITERS)
            .map(|w| {
                let mut keys: Vec<usize> = (0..KEYS).collect();
                keys.rotate_left(w * 5);
                (keys.iter())
                    .map(|k| new_record(&format!("r{round}-{k}"), &format!("w{w}"), bodies[w]))
                    .collect()
            })
            .collect();
        let written = join_all(batches.iter().map(|b| s.complete_batch(b))).await;
        let written: Vec<Vec<bool>> = written.into_iter().map(Result::unwrap).collect();
        for k in 0..KEYS {
            let key = format!("r{round}-{k}");
            let winners: Vec<usize> = (0..WRITERS)
                .filter(|&w| {
                    let at = batches[w].iter().position(|r| r.id == id(&key)).unwrap();
                    written[w][at]
                })
                .collect();
            assert_eq!(winners.len(), 1, "{key}: one writer wrote it: {winners:?}");
            let w = winners[0];
            let stored = (
                "completed".into(),
                format!("w{w}"),
                Some(bodies[w].to_vec()),
            );
            assert_eq!(row(&pg, &key).await, stored, "{key}: the winner's record");
        }
    }
}
