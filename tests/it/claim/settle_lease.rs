//! The lease through settle: the holder keeps its lease alive while it stores the
//! response, not only while the upstream call runs. Here Redis refuses the completion
//! (a response longer than its `proto-max-bulk-len`) and the write-through to Postgres
//! waits on a lock for longer than `lock_ttl`: a duplicate that arrives meanwhile must
//! find the key in flight, never run it a second time.

use std::time::Duration;

use crate::support::redis::backdate_markers;
use crate::support::{eventually, read, MockUpstream, PgServer, RedisServer, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_during_a_slow_settle_does_not_run() {
    let redis = RedisServer::start_with(&["--proto-max-bulk-len", "1mb"]);
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let extra = format!(
        "[postgres]\nurl = \"{}\"\nstatement_timeout = \"5s\"\nlookup_on_miss = \"when_cold\"\nclaims = \"redis\"\n\
         [idempotency]\nlock_ttl = \"900ms\"\n",
        pg.url()
    );
    let c = crate::support::config(&redis.url(), &upstream.url(), &extra);
    assert_eq!(c.redis.command_timeout, Duration::from_millis(300));
    let app = TestApp::spawn(c).await;
    // Redis provably warm: an acquired claim is not checked against Postgres.
    backdate_markers(&redis.url(), &[(0, 16383)], Duration::from_secs(48 * 3600)).await;
    app.until_policy_read().await;

    // Postgres takes no writes for 2 s (reads go on).
    let locker = pg.client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE idemgate_records IN SHARE MODE")
        .await
        .unwrap();
    upstream.set_padding(1_200_000); // Redis refuses to store it
    upstream.set_delay(Duration::from_millis(300));
    let first = tokio::spawn(app.post("slow-settle", "{}").send());
    // The upstream answered at 0.3 s; the lease, last extended before that, would
    // lapse by about 1.2 s without a heartbeat while the holder stores (real time).
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let duplicate = tokio::spawn(app.post("slow-settle", "{}").send());
    // The duplicate is answered, or runs (were the lease lost), while Postgres is locked.
    let met = async || duplicate.is_finished() || upstream.executions() > 1;
    assert!(eventually(Duration::from_secs(5), met).await, "no answer");
    locker.batch_execute("COMMIT").await.unwrap();

    let (status, _, _) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    let (status, _, _) = read(duplicate.await.unwrap().unwrap()).await;
    assert_eq!(
        upstream.executions(),
        1,
        "the duplicate ran while the holder stored"
    );
    assert_eq!(status, 409, "in flight while the holder stores");
    assert_eq!(pg.count("true").await, 1, "stored durably");
}
