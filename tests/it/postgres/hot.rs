//! The completion of a write-through claim is a HOT update (migration 0004): it changes
//! no indexed column, so Postgres writes no index entry for it, and the completed record
//! lives exactly its `ttl` from its completion (`replay_until`, migration 0005, not the
//! claim's longer `expires_at`). The completer's pass still finds abandoned requests
//! through an index.

use std::time::Duration;

use idemgate::testing::store::postgres::claim_asks::ClaimAsk;
use idemgate::testing::store::postgres::claim_rounds::ClaimRounds;
use idemgate::testing::store::postgres::{CompletedRecord, Found, PgClaim};

use crate::support::records::{fingerprint, id, rec, scope, store};
use crate::support::LEASE;
use crate::support::{eventually, PgServer};

const TTL: Duration = Duration::from_secs(3600);

/// `(n_tup_upd, n_tup_hot_upd)` of the records table, as the statistics report them.
async fn updates(pg: &PgServer) -> (i64, i64) {
    let row = (pg.client().await)
        .query_one(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
             WHERE relname = 'idemgate_records'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_completion_is_a_hot_update_and_lives_its_ttl() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let claims = ClaimRounds::spawn(s.clone(), 256);
    const N: usize = 8;
    let fp = fingerprint("{}");
    for i in 0..N {
        let key = format!("hot-{i}");
        let ask = ClaimAsk::new(rec(&key), &fp, &format!("t-{i}"), LEASE).living(TTL);
        let claimed = claims.claim_ask(ask).await.unwrap();
        assert!(matches!(claimed, PgClaim::Acquired { .. }), "{key}");
    }
    let done: Vec<CompletedRecord> = (0..N)
        .map(|i| CompletedRecord {
            scope: scope(),
            id: id(&format!("hot-{i}")),
            route: "payments".into(),
            fingerprint: fp,
            token: format!("t-{i}"),
            status: 201,
            headers: bytes::Bytes::from_static(b"\x00\x00"),
            body: bytes::Bytes::from(vec![b'x'; 150]),
            expiry: idemgate::idempotency::Expiry::within(TTL),
            origin: None,
            claimed_in_postgres: true,
        })
        .collect();
    assert_eq!(s.complete_batch(&done).await.unwrap(), vec![true; N]);
    let completed = std::time::Instant::now();

    // Each backend reports its counters when idle (within about a second).
    let reported = eventually(Duration::from_secs(15), async || {
        updates(&pg).await.0 >= N as i64
    })
    .await;
    assert!(
        reported,
        "the completions were counted: {:?}",
        updates(&pg).await
    );
    let (upd, hot) = updates(&pg).await;
    assert_eq!(
        (upd, hot),
        (N as i64, N as i64),
        "every completion is a HOT update"
    );
    for i in 0..N {
        match s.lookup(rec(&format!("hot-{i}"))).await.unwrap() {
            Some(Found::Completed { remaining, .. }) => {
                // What is left of its ttl from its completion, not the claim's
                // lease + ttl (which the row's expires_at keeps for the reaper).
                let left = TTL - completed.elapsed();
                assert!(
                    remaining <= left + Duration::from_millis(500)
                        && remaining + Duration::from_secs(2) > left,
                    "hot-{i}: a completed record lives its ttl from completion: \
                     {remaining:?}, {left:?} left"
                )
            }
            other => panic!("hot-{i}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_completers_pass_reads_an_index_that_names_no_completed_column() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let client = pg.client().await;
    // The pass's condition, as this release and the one before it write it.
    client
        .batch_execute("SET enable_seqscan = off")
        .await
        .unwrap();
    let plan: Vec<String> = (client.query(
        "EXPLAIN SELECT ctid FROM idemgate_records
         WHERE state = 'leased' AND request IS NOT NULL
           AND lease_expires_at < now() - interval '1 second'
         ORDER BY lease_expires_at LIMIT 10",
        &[],
    ))
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(
        plan.iter()
            .any(|l| l.contains("idemgate_records_kept_requests")),
        "{plan:#?}"
    );
    // No index names `state`, which every completion changes.
    let named: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'idemgate_records'
             AND indexdef LIKE '%state%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(named, 0);
}
