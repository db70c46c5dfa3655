//! A fleet whose replicas run different claim modes, as during a rolling switch to
//! `claims = "vouched"` (or back): a write-through replica that meets a key a vouched
//! replica kept in Redis alone, or the other way round, runs it no second time when
//! Redis loses its data or cannot be reached. Every replica here starts before the
//! vouched one records the deployment's epoch markers, so each learns of them from
//! Postgres at the moment it matters.

use std::time::Duration;

use super::vouched::{fsyncing_redis, post, LOCK_TTL, QUARANTINE};
use crate::support::{config, eventually, metric, MockUpstream, PgServer, RedisServer, TestApp};

const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// A replica with `claims = "<mode>"` on the shared stores, its admin API on.
async fn replica(redis: &RedisServer, pg: &PgServer, up: &MockUpstream, mode: &str) -> TestApp {
    let extra = format!(
        "[idempotency]\nlock_ttl = \"{}ms\"\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n{}",
        LOCK_TTL.as_millis(),
        pg.section(&format!("claims = \"{mode}\""))
    );
    TestApp::spawn(config(&redis.url(), &up.url(), &extra)).await
}

/// A write-through replica, then a vouched one once it recorded the epoch markers (it
/// may keep claims in Redis alone from then on).
async fn mixed_fleet() -> (RedisServer, PgServer, MockUpstream, TestApp, TestApp) {
    let (redis, pg, up) = (
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let through = replica(&redis, &pg, &up, "write_through").await;
    let vouched = replica(&redis, &pg, &up, "vouched").await;
    let client = pg.client().await;
    let recorded = eventually(Duration::from_secs(10), async || {
        let row = client.query_one("SELECT count(*) FROM idemgate_redis_epochs", &[]);
        row.await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    assert!(recorded, "the vouched replica recorded the epoch markers");
    (redis, pg, up, through, vouched)
}

/// What [`flushed_during_call`] saw.
struct Flushed {
    /// The holder's status and answer.
    held: (u16, bytes::Bytes),
    /// Postgres' leased rows during the call, before the flush.
    leased: i64,
    /// The other replica's retry at once after the flush, and after the quarantine.
    early: u16,
    late: u16,
}

/// `holder` runs `key` (slow); Redis is flushed during the call; `other` retries at
/// once and after the quarantine.
async fn flushed_during_call(
    (redis, pg, up): (&RedisServer, &PgServer, &MockUpstream),
    holder: &TestApp,
    other: &TestApp,
    key: &str,
) -> Flushed {
    let before = up.executions();
    let first = post(holder, key);
    let retries = async {
        up.until_executions(before + 1).await;
        let leased = pg.count("state = 'leased'").await;
        redis.cli(&["FLUSHALL"]);
        let early = post(other, key).await.0;
        tokio::time::sleep(QUARANTINE).await; // real time: the quarantine runs out
        let late = post(other, key).await.0;
        (leased, early, late)
    };
    let (held, (leased, early, late)) = tokio::join!(first, retries);
    Flushed {
        held,
        leased,
        early,
        late,
    }
}

#[tokio::test]
async fn a_write_through_replica_waits_for_a_key_a_vouched_replica_kept_alone_when_redis_loses_it()
{
    let (redis, pg, up, through, vouched) = mixed_fleet().await;
    up.set_delay(Duration::from_millis(3000));
    let seen = flushed_during_call((&redis, &pg, &up), &vouched, &through, "kept-alone").await;
    assert_eq!(seen.held.0, 201, "the holder's completion is not refused");
    assert_eq!(seen.leased, 0, "redis alone held the key: no claim row");
    assert_eq!(seen.early, 409, "in flight during the quarantine");
    assert_eq!(seen.late, 409, "in flight: the holder wrote its lease back");
    assert_eq!(up.executions(), 1, "the key ran once");
    assert_eq!(post(&through, "kept-alone").await, (201, seen.held.1));
    assert_eq!(up.executions(), 1);
}

#[tokio::test]
async fn a_vouched_replica_waits_for_a_key_a_write_through_replica_holds_when_redis_loses_it() {
    let (redis, pg, up, through, vouched) = mixed_fleet().await;
    up.set_delay(Duration::from_millis(3000));
    // The holder's lease is in its Postgres row: a vouched claim in a slot that lost its
    // data (cold: its warmth marker went too) looks the key up there, after the
    // quarantine as during it.
    let seen = flushed_during_call((&redis, &pg, &up), &through, &vouched, "written-through").await;
    assert_eq!(seen.held.0, 201);
    assert_eq!(seen.leased, 1, "the holder's claim row");
    assert_eq!(seen.early, 409, "in flight during the quarantine");
    assert_eq!(seen.late, 409, "in flight: postgres holds the lease");
    assert_eq!(up.executions(), 1, "the key ran once");
    assert_eq!(post(&vouched, "written-through").await, (201, seen.held.1));
    assert_eq!(up.executions(), 1);
}

#[tokio::test]
async fn a_write_through_replica_without_redis_runs_no_key_postgres_does_not_know() {
    let (mut redis, _pg, up, through, vouched) = mixed_fleet().await;
    let (status, stored) = post(&through, "stored").await;
    assert_eq!(status, 201);
    up.set_delay(Duration::from_millis(3000));
    let held = post(&vouched, "held-alone");
    let outage = async {
        up.until_executions(2).await;
        // The key is held by Redis alone; Redis goes away while the call runs.
        redis.stop();
        let retry = post(&through, "held-alone").await.0;
        let new = post(&through, "new-while-down").await.0;
        let replay = post(&through, "stored").await;
        (retry, new, replay)
    };
    let (_, (retry, new, replay)) = tokio::join!(held, outage);
    assert_eq!(retry, 503, "postgres does not know the lease redis kept");
    assert_eq!(new, 503, "nor can it tell a new key from one redis kept");
    assert_eq!(
        replay,
        (201, stored),
        "a stored answer replays from postgres"
    );
    assert_eq!(
        up.executions(),
        2,
        "the held key ran once, the new one not at all"
    );
}

/// A forced invalidation frees a key a write-through replica is running, and a vouched
/// replica runs it again, kept by Redis alone: the first execution's completion finds
/// no claim row of its own in Postgres and Redis naming the other holder, so it is
/// refused (not stored in Postgres while Redis keeps the other answer), and both tiers
/// keep the second execution's answer.
#[tokio::test]
async fn a_write_through_holder_of_a_key_forced_free_yields_to_the_vouched_rerun() {
    let (_redis, pg, up, through, vouched) = mixed_fleet().await;
    up.set_delay(Duration::from_millis(1500));
    let first = post(&through, "forced-free");
    let rerun = async {
        up.until_executions(1).await;
        assert_eq!(
            pg.count("state = 'leased'").await,
            1,
            "the holder's claim row"
        );
        let url = format!(
            "http://{}/admin/keys/payments/forced-free?force=true",
            through.admin
        );
        let deleted = (through.client.delete(url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 200);
        let second = post(&vouched, "forced-free");
        let leased = async {
            up.until_executions(2).await;
            pg.count("state = 'leased'").await
        };
        tokio::join!(second, leased)
    };
    let ((first, _), (second, leased)) = tokio::join!(first, rerun);
    assert_eq!(leased, 0, "the rerun is kept by redis alone");
    assert_eq!(first, 409, "the first execution's completion is refused");
    assert_eq!(second.0, 201);
    assert_eq!(up.executions(), 2, "freed on purpose: it ran again");
    let disagreed = metric(
        &vouched.metrics().await,
        "idemgate_tier_disagreements_total{kind=\"stored_in_redis_conflict_in_postgres\"}",
    );
    assert_eq!(disagreed, 0.0, "postgres took the rerun's answer too");
    let client = pg.client().await;
    let rows = (client.query("SELECT body FROM idemgate_records", &[]))
        .await
        .unwrap();
    let bodies: Vec<Vec<u8>> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        bodies,
        [second.1.to_vec()],
        "postgres keeps the rerun's answer"
    );
    assert_eq!(post(&through, "forced-free").await, (201, second.1));
    assert_eq!(up.executions(), 2);
}
