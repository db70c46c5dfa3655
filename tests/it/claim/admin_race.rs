//! The admin `DELETE` decides and deletes in one step per tier, so a
//! claim that lands during the call is never deleted without `force`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method};
use idemgate::config::{PostgresConfig, RedisConfig};
use idemgate::idempotency::{key, Claim, Fingerprint, RecordId, Scope};
use idemgate::testing::store::postgres::{CompletedRecord, PgClaim, RecordRef};
use idemgate::testing::store::redis::Invalidated;
use idemgate::testing::store::{PgStore, RedisStore};

use crate::support::LEASE;
use crate::support::{
    config, eventually, problem_code, read, until_rows, MockUpstream, PgServer, RedisServer,
    TestApp,
};
use idemgate::testing::store::redis::slots::Slotted;
use idemgate::testing::store::redis::OnLapsed;

/// The record, scope and fingerprint of `app.post(key, "{}")` on the test route.
fn target(raw_key: &str) -> (Scope, RecordId, Fingerprint) {
    let scope = Scope::anonymous("payments", &[http::header::AUTHORIZATION], None);
    let id = RecordId::new(scope, &key::parse(raw_key.as_bytes(), 255).unwrap(), None);
    let json = HeaderValue::from_static("application/json");
    let uri = "/v1/payments".parse().unwrap();
    (
        scope,
        id,
        Fingerprint::new(
            &Default::default(),
            &Method::POST,
            &uri,
            &http::HeaderMap::from_iter([(http::header::CONTENT_TYPE, json)]),
            b"{}",
        ),
    )
}

async fn redis_store(redis: &RedisServer) -> RedisStore {
    let config = RedisConfig {
        url: redis.url(),
        ..RedisConfig::default()
    };
    RedisStore::connect(&config).await.unwrap()
}

async fn pg_store(pg: &PgServer) -> PgStore {
    let store = PgStore::new(&PostgresConfig {
        url: pg.url(),
        ..PostgresConfig::default()
    })
    .unwrap();
    store.migrate().await.unwrap();
    store
}

/// Whether a session of the gateway waits for a lock on a statement about one record.
async fn waiting_on_lock(client: &tokio_postgres::Client) -> bool {
    let n: i64 = (client.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemgate'
           AND wait_event_type = 'Lock' AND query LIKE '%scope = $1 AND key_hash = $2%'",
        &[],
    ))
    .await
    .unwrap()
    .get(0);
    n > 0
}

#[tokio::test]
async fn redis_invalidate_keeps_a_live_lease_unless_forced() {
    let redis = RedisServer::start();
    let store = redis_store(&redis).await;
    let (_, id, fp) = target("leased");
    let k = store.record_key(id);
    assert_eq!(
        store.invalidate(&k, false).await.unwrap(),
        Invalidated::Absent
    );

    let claim = store
        .claim(
            Slotted::new(&k),
            &fp,
            "holder",
            (LEASE, LEASE),
            true,
            OnLapsed::Ask,
        )
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
    let refused = store.invalidate(&k, false).await.unwrap();
    assert!(
        matches!(refused, Invalidated::Leased { remaining } if remaining > LEASE / 2),
        "{refused:?}"
    );
    let held = store
        .inspect(&k)
        .await
        .unwrap()
        .expect("the lease is still there");
    assert!(!held.completed);
    let duplicate = store
        .claim(
            Slotted::new(&k),
            &fp,
            "dup",
            (LEASE, LEASE),
            true,
            OnLapsed::Ask,
        )
        .await
        .unwrap();
    assert!(matches!(duplicate, Claim::InFlight { .. }), "{duplicate:?}");

    assert_eq!(
        store.invalidate(&k, true).await.unwrap(),
        Invalidated::Deleted
    );
    assert!(store.inspect(&k).await.unwrap().is_none());

    // Completed records go without force.
    let claim = store
        .claim(
            Slotted::new(&k),
            &fp,
            "next",
            (LEASE, LEASE),
            true,
            OnLapsed::Ask,
        )
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
    let response = Bytes::from_static(b"\x01\x00\xc9\x00\x00{}");
    store
        .complete(&k, "next", response, LEASE, &fp)
        .await
        .unwrap();
    assert_eq!(
        store.invalidate(&k, false).await.unwrap(),
        Invalidated::Deleted
    );
    assert!(store.inspect(&k).await.unwrap().is_none());
}

#[tokio::test]
async fn postgres_invalidate_keeps_a_live_lease_unless_forced() {
    let pg = PgServer::start();
    let store = pg_store(&pg).await;
    let (scope, id, fp) = target("leased");
    let rec = RecordRef {
        scope,
        id,
        route: "payments",
    };
    assert_eq!(
        store.invalidate(rec, false).await.unwrap(),
        Invalidated::Absent
    );

    let claim = store.claim(rec, &fp, "holder", LEASE).await.unwrap();
    assert!(matches!(claim, PgClaim::Acquired { .. }), "{claim:?}");
    let refused = store.invalidate(rec, false).await.unwrap();
    assert!(
        matches!(refused, Invalidated::Leased { remaining } if remaining > LEASE / 2),
        "{refused:?}"
    );
    assert_eq!(pg.count("state = 'leased'").await, 1);
    let duplicate = store.claim(rec, &fp, "dup", LEASE).await.unwrap();
    assert!(matches!(duplicate, PgClaim::Held(_)), "{duplicate:?}");
    assert_eq!(
        store.invalidate(rec, true).await.unwrap(),
        Invalidated::Deleted
    );
    assert_eq!(pg.count("true").await, 0);

    // An expired lease and a completed record go without force.
    let claim = store
        .claim(rec, &fp, "short", Duration::from_millis(1))
        .await;
    assert!(matches!(claim.unwrap(), PgClaim::Acquired { .. }));
    until_rows(&pg, "lease_expires_at <= now()", 1).await;
    assert_eq!(
        store.invalidate(rec, false).await.unwrap(),
        Invalidated::Deleted
    );
    assert_eq!(
        store
            .complete_batch(&[completed(rec, fp, 60_000)])
            .await
            .unwrap(),
        [true]
    );
    assert_eq!(
        store.invalidate(rec, false).await.unwrap(),
        Invalidated::Deleted
    );
    assert_eq!(pg.count("true").await, 0);
}

fn completed(rec: RecordRef<'_>, fingerprint: Fingerprint, ttl_ms: i64) -> CompletedRecord {
    CompletedRecord {
        scope: rec.scope,
        id: rec.id,
        route: rec.route.into(),
        fingerprint,
        token: "t".into(),
        status: 201,
        headers: Bytes::from_static(b"\x00\x00"),
        body: Bytes::from_static(b"{}"),
        expiry: idemgate::idempotency::Expiry::within(std::time::Duration::from_millis(
            ttl_ms as u64,
        )),
        origin: None,
        claimed_in_postgres: false,
    }
}

/// The check and the delete are one statement: a takeover that commits while the
/// `DELETE` waits for the row is re-checked against the `WHERE`, and kept.
#[tokio::test]
async fn postgres_invalidate_rechecks_a_takeover_that_commits_meanwhile() {
    let pg = PgServer::start();
    let store = pg_store(&pg).await;
    let (scope, id, fp) = target("taken-over");
    let rec = RecordRef {
        scope,
        id,
        route: "payments",
    };
    // An expired record: free for the admin API to delete, and for a claim to take over.
    assert_eq!(
        store
            .complete_batch(&[completed(rec, fp, 1)])
            .await
            .unwrap(),
        [true]
    );
    until_rows(&pg, "expires_at <= now()", 1).await;

    let mut taker = pg.client().await;
    let tx = taker.transaction().await.unwrap();
    let took = tx
        .execute(
            "UPDATE idemgate_records SET state = 'leased', lock_token = 'taker',
               lease_expires_at = now() + interval '30 seconds',
               expires_at = now() + interval '30 seconds', status = NULL, headers = NULL, body = NULL
             WHERE scope = $1 AND key_hash = $2 AND expires_at <= now()",
            &[&&scope.as_bytes()[..], &&id.as_bytes()[..]],
        )
        .await
        .unwrap();
    assert_eq!(took, 1);
    let store2 = store.clone();
    let invalidate = tokio::spawn(async move {
        let rec = RecordRef {
            scope,
            id,
            route: "payments",
        };
        store2.invalidate(rec, false).await
    });
    let observer = pg.client().await;
    assert!(
        eventually(Duration::from_secs(1), async || waiting_on_lock(&observer)
            .await)
        .await,
        "the DELETE never waited for the takeover's row lock"
    );
    tx.commit().await.unwrap();
    let outcome = invalidate.await.unwrap().unwrap();
    assert!(matches!(outcome, Invalidated::Leased { .. }), "{outcome:?}");
    assert_eq!(
        pg.count("state = 'leased' AND lock_token = 'taker'").await,
        1
    );
}

const TOKEN: &str = "test-admin-token-0123456789";

/// The race of the issue, end to end: the admin call reads Redis (nothing there), then
/// stalls in Postgres; meanwhile another replica's claim lands in Redis. Checking
/// first and deleting after would delete that lease and let a duplicate run.
#[tokio::test]
async fn an_admin_delete_keeps_a_claim_that_lands_during_the_call() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let toml = format!(
        "[postgres]\nurl = \"{}\"\nstatement_timeout = \"5s\"\n[admin]\ntoken = \"{TOKEN}\"\n",
        pg.url()
    );
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml)).await;
    let store = redis_store(&redis).await;
    let (_, id, fp) = target("landing");
    let k = store.record_key(id);

    let mut locker = pg.client().await;
    let tx = locker.transaction().await.unwrap();
    (tx.batch_execute("LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE"))
        .await
        .unwrap();
    let url = format!("http://{}/admin/keys/payments/landing", app.admin);
    let delete = (app.client.delete(url))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send();
    let delete = tokio::spawn(delete);
    let observer = pg.client().await;
    assert!(
        eventually(Duration::from_secs(3), async || waiting_on_lock(&observer)
            .await)
        .await,
        "the admin call never reached Postgres"
    );
    let claim = store
        .claim(
            Slotted::new(&k),
            &fp,
            "other-replica",
            (LEASE, LEASE),
            true,
            OnLapsed::Ask,
        )
        .await;
    assert!(matches!(claim.unwrap(), Claim::Acquired(_)));
    tx.rollback().await.unwrap();

    let (status, headers, body) = read(delete.await.unwrap().unwrap()).await;
    assert_eq!(status, 409, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "record_leased");
    let held = store
        .inspect(&k)
        .await
        .unwrap()
        .expect("the claim survived");
    assert!(!held.completed);
    let duplicate = app.post("landing", "{}").send().await.unwrap();
    assert_eq!(
        duplicate.status(),
        409,
        "the duplicate waits for the holder"
    );
    assert_eq!(upstream.executions(), 0);
}
