//! Postgres statements that stall. A claim that timed out
//! must not leave its lease behind (the server enforces the timeout too, and a claim
//! whose outcome is unknown is released), and a reaper pass that stalls must be bounded
//! and must not leave the fleet-wide reaper lock held. A released claim that followed a
//! lapsed lease keeps that lapse known.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idemgate::testing::store::postgres::claim_asks::ClaimAsk;
use idemgate::testing::store::postgres::{CompletedRecord, PgClaim};
use idemgate::testing::store::PgStore;

use crate::support::records::{completed as record, fingerprint, rec_of as rec, store_at as store};
use crate::support::LEASE;
use crate::support::{eventually, until_rows, HoldProxy, PgServer};

/// The reaper's advisory lock key ("idemreap").
const REAP_LOCK: i64 = 0x6964_656d_7265_6170;

/// Who holds the row of `r`, as Postgres has it.
async fn lock_token(pg: &PgServer, r: &CompletedRecord) -> Option<String> {
    let row = (pg.client().await)
        .query_one(
            "SELECT lock_token FROM idemgate_records WHERE key_hash = $1",
            &[&&r.id.as_bytes()[..]],
        )
        .await
        .unwrap();
    row.get(0)
}

/// Whether a session of the gateway's waits on a lock (a row another session holds).
async fn waiting_on_a_lock(observer: &tokio_postgres::Client) -> bool {
    let sql = "SELECT count(*) FROM pg_stat_activity
               WHERE application_name = 'idemgate' AND wait_event_type = 'Lock'";
    observer.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) > 0
}

/// A store reaching `pg` through a proxy that can hold its answers back, with one pooled
/// connection through it and the claim statement prepared on it.
async fn behind_a_proxy(pg: &PgServer) -> (HoldProxy, PgStore) {
    let proxy = HoldProxy::start(SocketAddr::from(([127, 0, 0, 1], pg.port))).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port);
    let behind = store(url, Duration::from_millis(500));
    let warm = record("warm-up", 60_000);
    (behind
        .claim(rec(&warm), &fingerprint(""), "warm", LEASE)
        .await)
        .unwrap();
    (proxy, behind)
}

/// Whether a claim of `r` with the token "retry" acquires it within 5 s.
async fn retry_acquires(direct: &PgStore, r: &CompletedRecord) -> bool {
    eventually(Duration::from_secs(5), async || {
        let claim = direct.claim(rec(r), &fingerprint(""), "retry", LEASE).await;
        matches!(claim, Ok(PgClaim::Acquired { .. }))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_stalled_past_the_timeout_does_not_commit_later() {
    let pg = PgServer::start();
    let s = store(pg.url(), Duration::from_millis(500));
    s.migrate().await.unwrap();
    // An expired record: a claim would take it over, once it gets the row.
    let r = record("stalled", 1);
    s.complete_batch(std::slice::from_ref(&r)).await.unwrap();
    until_rows(&pg, "expires_at <= now()", 1).await;

    // Another session holds the row for longer than the statement timeout.
    let mut blocker = pg.client().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM idemgate_records WHERE key_hash = $1 FOR UPDATE",
        &[&&r.id.as_bytes()[..]],
    )
    .await
    .unwrap();
    let started = Instant::now();
    let stalled = s.claim(rec(&r), &fingerprint(""), "timed-out", LEASE).await;
    assert!(stalled.is_err(), "the claim waits on the row: {stalled:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The server ended the claim's statement too: nothing waits on the row any more.
    let observer = pg.client().await;
    let ended = eventually(Duration::from_secs(5), async || {
        !waiting_on_a_lock(&observer).await
    });
    assert!(ended.await, "the timed-out claim still waits on the row");
    tx.rollback().await.unwrap();
    // Real time: a late commit, were there one, would land meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The caller was told the claim failed: the key must not be leased to it.
    let retry = s
        .claim(rec(&r), &fingerprint(""), "retry", LEASE)
        .await
        .unwrap();
    let holder = lock_token(&pg, &r).await;
    assert!(
        matches!(retry, PgClaim::Acquired { .. }),
        "a retry after the stall gets the key, got {retry:?} (row leased by {holder:?})"
    );
    assert_eq!(holder.as_deref(), Some("retry"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_is_lost_is_released() {
    let pg = PgServer::start();
    let direct = store(pg.url(), Duration::from_millis(500));
    direct.migrate().await.unwrap();
    // Every token that ever committed a lease, whatever happened to the row after.
    (pg.client().await)
        .batch_execute(
            "CREATE TABLE leased_by (token text);
             CREATE FUNCTION note_lease() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO leased_by VALUES (NEW.lock_token); RETURN NULL; END $$;
             CREATE TRIGGER note_lease AFTER INSERT OR UPDATE ON idemgate_records
               FOR EACH ROW WHEN (NEW.state = 'leased') EXECUTE FUNCTION note_lease();",
        )
        .await
        .unwrap();
    let (proxy, behind) = behind_a_proxy(&pg).await;
    let r = record("lost-answer", 60_000);

    // The claim reaches Postgres and commits; its answer never comes back in time.
    proxy.hold(true);
    let started = Instant::now();
    let lost = behind
        .claim(rec(&r), &fingerprint(""), "unknown", LEASE)
        .await;
    assert!(lost.is_err(), "no answer within the timeout: {lost:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let committed: i64 = (pg.client().await)
        .query_one(
            "SELECT count(*) FROM leased_by WHERE token = 'unknown'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(committed, 1, "the claim did commit");

    // Its caller was told it failed, so nothing owns that lease: another replica must
    // get the key well before the lease (30 s) runs out.
    let freed = retry_acquires(&direct, &r).await;
    let holder = lock_token(&pg, &r).await;
    proxy.hold(false);
    assert!(
        freed,
        "the unknown claim is released (row leased by {holder:?})"
    );
}

/// A claim that took over a lapsed lease (`after_lapse`) and whose answer was lost is
/// released by ending its lease, not deleting its row: the next claim still learns that
/// the key's outcome is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_of_a_lapsed_lease_keeps_the_lapse_known() {
    let pg = PgServer::start();
    let direct = store(pg.url(), Duration::from_millis(500));
    direct.migrate().await.unwrap();
    let (proxy, behind) = behind_a_proxy(&pg).await;
    // A lease of 1 ms in a record that lives a minute: its holder "died".
    let r = record("lapsed", 60_000);
    let died = ClaimAsk::new(rec(&r), &fingerprint(""), "died", Duration::from_millis(1))
        .living(Duration::from_secs(60));
    direct.claim_round(&[&died]).await.pop().unwrap().unwrap();
    until_rows(&pg, "lease_expires_at <= now()", 1).await;

    proxy.hold(true);
    let lost = behind
        .claim(rec(&r), &fingerprint(""), "unknown", LEASE)
        .await;
    assert!(lost.is_err(), "no answer within the timeout: {lost:?}");
    let retried = retry_acquires(&direct, &r).await;
    proxy.hold(false);
    assert!(retried, "the unknown claim is released");
    // The retry's claim above took it over; ask again with its token: what it found.
    let again = direct
        .claim(rec(&r), &fingerprint(""), "retry", LEASE)
        .await;
    assert!(
        matches!(
            again,
            Ok(PgClaim::Acquired {
                after_lapse: true,
                ..
            })
        ),
        "the lapse was forgotten by the release: {again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reap_that_stops_answering_is_bounded_and_leaves_the_reaper_lock_free() {
    let pg = PgServer::start();
    let direct = store(pg.url(), Duration::from_secs(2));
    direct.migrate().await.unwrap();
    let expired: Vec<CompletedRecord> = (0..5).map(|i| record(&format!("old-{i}"), 1)).collect();
    direct.complete_batch(&expired).await.unwrap();
    until_rows(&pg, "expires_at <= now()", 5).await;
    let proxy = HoldProxy::start(SocketAddr::from(([127, 0, 0, 1], pg.port))).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port);
    let behind = store(url, Duration::from_secs(2));

    // A session holds one expired row, so replica A's reap stalls on it, holding the
    // reaper lock; then A's session stops answering (nothing comes back from Postgres).
    let mut blocker = pg.client().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM idemgate_records WHERE key_hash = $1 FOR UPDATE",
        &[&&expired[0].id.as_bytes()[..]],
    )
    .await
    .unwrap();
    // (The replica lives on: its pool, and whatever its sessions hold, outlive the pass.)
    let replica_a = behind.clone();
    let reap = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(6), replica_a.reap(100)).await
    });
    let observer = pg.client().await;
    let waiting = eventually(Duration::from_secs(5), async || {
        waiting_on_a_lock(&observer).await
    })
    .await;
    assert!(waiting, "the reap waits on the locked row");
    proxy.hold(true);
    let stalled = reap.await.unwrap();
    let bounded = matches!(stalled, Ok(Err(_)));

    // Right after, the reaper lock is free for anyone else.
    let lock_free = eventually(Duration::from_secs(3), async || {
        (observer.query_one("SELECT pg_try_advisory_xact_lock($1)", &[&REAP_LOCK]))
            .await
            .unwrap()
            .get(0)
    })
    .await;

    // The stall ends: the next pass, on another replica, reaps everything expired.
    tx.rollback().await.unwrap();
    proxy.hold(false);
    let next = direct.reap(100).await.ok();
    let left = pg.count("expires_at <= now()").await;
    drop(behind);
    assert!(
        bounded && lock_free && next == Some(Some(5)) && left == 0,
        "the stalled reap ends with an error: {stalled:?}; the reaper lock is free after \
         it: {lock_free}; the next pass, on another replica, reaps all: {next:?}, {left} left"
    );
}
