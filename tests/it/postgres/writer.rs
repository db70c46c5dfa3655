//! The write-through writer against a Postgres that refuses some
//! records. A refused record is given up (and counted) instead of being retried at the
//! head of the queue forever; the records around it are written; batches are bounded
//! in bytes as well as in records.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use idemgate::testing::store::postgres::writer::{WriteOutcome, Writer, MAX_BATCH_BYTES};
use idemgate::testing::store::postgres::CompletedRecord;
use idemgate::testing::store::{PgStore, StoreError};

use crate::support::records::{completed, store_at};
use crate::support::{eventually, PgServer};

fn store(pg: &PgServer) -> PgStore {
    store_at(pg.url(), Duration::from_secs(2))
}

fn record(key: &str) -> CompletedRecord {
    completed(key, 3_600_000)
}

/// The route whose records the test trigger refuses.
const REFUSED_ROUTE: &str = "refused-route";

/// Two records Postgres refuses: one by a trigger (as a constraint an operator added
/// would), one by itself (a text column cannot hold a NUL byte).
fn refused(tag: &str) -> [CompletedRecord; 2] {
    let mut by_trigger = record(&format!("{tag}-trigger"));
    by_trigger.route = REFUSED_ROUTE.into();
    let mut by_postgres = record(&format!("{tag}-nul"));
    by_postgres.route = "pay\0ments".into();
    [by_trigger, by_postgres]
}

async fn refusing_postgres() -> (PgServer, PgStore) {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    (pg.client().await)
        .batch_execute(&format!(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.route = '{REFUSED_ROUTE}' THEN
                 RAISE EXCEPTION 'refused by the test trigger';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON idemgate_records
               FOR EACH ROW EXECUTE FUNCTION refuse();"
        ))
        .await
        .unwrap();
    (pg, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_records_fail_alone_and_their_batch_is_written() {
    let (pg, s) = refusing_postgres().await;
    let writer = Writer::spawn(s, 256, 1000, u64::MAX);
    let mut records: Vec<CompletedRecord> = (0..10).map(|i| record(&format!("good-{i}"))).collect();
    records.splice(5..5, refused("batch"));
    let outcomes = join_all(records.iter().map(|r| writer.write(r.clone()))).await;

    for (r, outcome) in records.iter().zip(&outcomes) {
        if r.route == "payments" {
            assert!(
                matches!(outcome, Ok(WriteOutcome::Written)),
                "a good record is written: {outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, Err(StoreError::Pg(_))),
                "a refused record fails on its own: {outcome:?}"
            );
        }
    }
    assert_eq!(pg.count("state = 'completed'").await, 10);
    assert_eq!(writer.dropped(), 2);
    assert_eq!(writer.queue_depth(), 0);
    let later = writer.write(record("later")).await;
    assert!(matches!(later, Ok(WriteOutcome::Written)), "{later:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_record_in_the_retry_queue_does_not_stall_it() {
    let (mut pg, s) = refusing_postgres().await;
    let writer = Writer::spawn(s, 256, 1000, u64::MAX);
    // Postgres goes away: everything waits in the retry queue, the refused records
    // among the others.
    pg.stop();
    let mut records: Vec<CompletedRecord> =
        (0..6).map(|i| record(&format!("queued-{i}"))).collect();
    records.splice(2..2, refused("queued"));
    for r in &records {
        let outcome = writer.write(r.clone()).await;
        assert!(matches!(outcome, Ok(WriteOutcome::Queued)), "{outcome:?}");
    }
    pg.restart();
    let drained = eventually(Duration::from_secs(15), async || {
        writer.queue_depth() == 0 && pg.count("state = 'completed'").await == 6
    })
    .await;
    assert!(
        drained,
        "the queue drains around the refused records: {} left, {} written",
        writer.queue_depth(),
        pg.count("state = 'completed'").await
    );
    assert_eq!(
        writer.dropped(),
        2,
        "the refused ones are given up and counted"
    );
    // Later writes are not stuck behind them.
    let later = writer.write(record("after")).await;
    assert!(matches!(later, Ok(WriteOutcome::Written)), "{later:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_bounded_in_bytes() {
    let mut pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let writer = Writer::spawn(s, 256, 1000, u64::MAX);
    // Three 6 MiB responses wait for Postgres; 16 MiB per statement fits two of them.
    assert_eq!(MAX_BATCH_BYTES, 16 << 20);
    pg.stop();
    let big = Bytes::from(vec![b'x'; 6 << 20]);
    for i in 0..3 {
        let mut r = record(&format!("big-{i}"));
        r.body = big.clone();
        let outcome = writer.write(r).await;
        assert!(matches!(outcome, Ok(WriteOutcome::Queued)), "{outcome:?}");
    }
    pg.restart();
    let drained = eventually(Duration::from_secs(15), async || {
        writer.queue_depth() == 0 && pg.count("true").await == 3
    })
    .await;
    assert!(drained);
    let statements = pg.writing_statements().await;
    assert_eq!(statements, 2, "18 MiB of responses take two statements");
}

/// The retry queue is bounded in bytes as well as records, so an
/// outage with large responses cannot grow it past the process's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_queue_is_bounded_in_bytes() {
    let mut pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    // Room for two 1 MiB records, whatever the record count allows.
    let writer = Writer::spawn(s, 256, 1000, 2 * 1024 * 1024 + 64 * 1024);
    pg.stop();
    let big = |i: usize| {
        let mut r = record(&format!("big-{i}"));
        r.body = bytes::Bytes::from(vec![b'x'; 1024 * 1024]);
        r
    };
    let outcomes = [
        writer.write(big(0)).await,
        writer.write(big(1)).await,
        writer.write(big(2)).await,
    ];
    assert!(
        matches!(outcomes[0], Ok(WriteOutcome::Queued)),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], Ok(WriteOutcome::Queued)),
        "{outcomes:?}"
    );
    assert!(
        matches!(
            outcomes[2],
            Err(idemgate::testing::store::StoreError::QueueFull)
        ),
        "the third would pass the byte budget: {outcomes:?}"
    );
    assert_eq!(writer.queue_depth(), 2);
    assert!(writer.queued_bytes() <= 2 * 1024 * 1024 + 64 * 1024);
    // Drained, the budget is free again.
    pg.restart();
    let drained = eventually(Duration::from_secs(15), async || writer.queue_depth() == 0).await;
    assert!(drained);
    assert_eq!(writer.queued_bytes(), 0);
    assert_eq!(pg.count("state = 'completed'").await, 2);
}
