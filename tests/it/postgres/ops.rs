//! Migrations under concurrency, schema versions, the records table's autovacuum
//! setting, the reaper, and `lookup_on_miss = "when_cold"`.

use bytes::Bytes;
use fred::prelude::{ClientLike, KeysInterface, Value};
use idemgate::idempotency::{Fingerprint, IdempotencyKey, RecordId, Scope, StoredRecord};
use idemgate::testing::store::postgres::lookups::Lookups;
use idemgate::testing::store::postgres::{CompletedRecord, Found, RecordRef};
use idemgate::testing::store::StoreError;

use crate::support::records::{completed as record, fingerprint, store};
use crate::support::{durable_stack, until_rows, PgServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_migrating_at_once_leave_one_schema() {
    let pg = PgServer::start();
    let stores = [store(&pg), store(&pg), store(&pg)];
    let results = futures_util::future::join_all(stores.iter().map(|s| s.migrate())).await;
    let applied: Vec<Vec<i32>> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        applied.iter().filter(|a| !a.is_empty()).count(),
        1,
        "{applied:?}"
    );
    let client = pg.client().await;
    let versions: i64 = client
        .query_one("SELECT count(*) FROM idemgate_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        versions as usize,
        idemgate::testing::store::postgres::migrate::MIGRATIONS.len()
    );
    stores[0].check_schema().await.unwrap();
}

/// The records table's `autovacuum_vacuum_scale_factor`, if it has one of its own.
async fn vacuum_scale(pg: &PgServer) -> Option<String> {
    (pg.client().await)
        .query_opt(
            "SELECT o.option_value FROM pg_class c, pg_options_to_table(c.reloptions) o
             WHERE c.oid = 'idemgate_records'::regclass
               AND o.option_name = 'autovacuum_vacuum_scale_factor'",
            &[],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

#[tokio::test]
async fn autovacuum_comes_at_one_percent_dead_unless_an_administrator_chose_otherwise() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    assert_eq!(vacuum_scale(&pg).await.as_deref(), Some("0.01"));
    // A table an administrator had tuned before the migration keeps its setting.
    let client = pg.client().await;
    client
        .batch_execute(
            "ALTER TABLE idemgate_records SET (autovacuum_vacuum_scale_factor = 0.05);
             DELETE FROM idemgate_schema WHERE version >= 6",
        )
        .await
        .unwrap();
    let latest = idemgate::testing::store::postgres::migrate::latest();
    assert_eq!(s.migrate().await.unwrap(), (6..=latest).collect::<Vec<_>>());
    assert_eq!(vacuum_scale(&pg).await.as_deref(), Some("0.05"));
}

#[tokio::test]
async fn a_newer_schema_is_a_clear_error() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let client = pg.client().await;
    client
        .execute(
            "INSERT INTO idemgate_schema (version, name) VALUES (999, 'future')",
            &[],
        )
        .await
        .unwrap();
    let err = s.migrate().await.unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { database: 999, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("newer than this binary"), "{err}");
    assert!(s.check_schema().await.is_err());
}

fn record_for(scope: Scope, key: &IdempotencyKey, fp: Fingerprint, ttl_ms: i64) -> CompletedRecord {
    CompletedRecord {
        scope,
        id: RecordId::new(scope, key, None),
        route: "payments".into(),
        fingerprint: fp,
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

#[tokio::test]
async fn reaper_deletes_only_expired_rows_in_batches() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let expiring: Vec<CompletedRecord> = (0..5).map(|i| record(&format!("old-{i}"), 1)).collect();
    let keeping: Vec<CompletedRecord> = (0..3)
        .map(|i| record(&format!("new-{i}"), 3_600_000))
        .collect();
    assert!(s
        .complete_batch(&expiring)
        .await
        .unwrap()
        .iter()
        .all(|w| *w));
    assert!(s.complete_batch(&keeping).await.unwrap().iter().all(|w| *w));
    until_rows(&pg, "expires_at <= now()", 5).await;
    assert_eq!(
        s.reap(2).await.unwrap(),
        Some(5),
        "batches of 2 until none is left"
    );
    assert_eq!(pg.count("true").await, 3);
    assert_eq!(pg.count("expires_at <= now()").await, 0);
    assert_eq!(s.reap(2).await.unwrap(), Some(0));
}

#[tokio::test]
async fn only_one_replica_reaps_at_a_time() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let holder = pg.client().await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&0x6964_656d_7265_6170_i64])
        .await
        .unwrap();
    assert_eq!(
        s.reap(10).await.unwrap(),
        None,
        "another replica holds the reaper lock"
    );
}

#[tokio::test]
async fn when_cold_skips_lookups_while_the_marker_holds_and_looks_up_after_a_flush() {
    let (redis, _pg, upstream, app) =
        durable_stack("lookup_on_miss = \"when_cold\"\nclaims = \"redis\"", "").await;
    let admin = redis.client().await;
    // Pretend this Redis has held its data for longer than the longest ttl (24h).
    super::warm_up(&redis).await;
    app.until_policy_read().await;

    app.post("a", "{}").send().await.unwrap();
    app.post("b", "{}").send().await.unwrap();
    // Lose one record from Redis only: the marker still vouches for Redis, so no lookup.
    let keys = redis.records().await;
    let _: i64 = admin.del(keys[0].clone()).await.unwrap();
    let again = futures_util::future::join_all(["a", "b"].map(|k| app.post(k, "{}").send())).await;
    let replayed: Vec<bool> = again
        .iter()
        .map(|r| r.as_ref().unwrap().headers()["idempotent-replayed"] == "true")
        .collect();
    assert_eq!(
        replayed.iter().filter(|r| !**r).count(),
        1,
        "the deleted one re-ran: no lookup"
    );
    assert_eq!(upstream.executions(), 3);

    // A flush removes the marker: Redis is cold, so the lookup happens and replays.
    let _: Value = admin
        .custom(fred::cmd!("FLUSHALL"), Vec::<String>::new())
        .await
        .unwrap();
    for k in ["a", "b"] {
        let r = app.post(k, "{}").send().await.unwrap();
        assert_eq!(
            r.headers()["idempotent-replayed"],
            "true",
            "key {k} replayed from postgres"
        );
    }
    assert_eq!(upstream.executions(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_lookups_answer_each_key_with_its_own_record() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    // 40 keys stored, each with its own body and status; 40 more never stored; one
    // stored in another tenant's scope only.
    let stored: Vec<CompletedRecord> = (0..40)
        .map(|i| {
            let mut r = record(&format!("stored-{i}"), 60_000);
            r.body = Bytes::from(format!("{{\"n\":{i}}}"));
            r.status = 200 + i;
            r
        })
        .collect();
    assert!(s.complete_batch(&stored).await.unwrap().iter().all(|w| *w));
    let mut tenant_b = http::HeaderMap::new();
    tenant_b.insert(
        http::header::AUTHORIZATION,
        http::HeaderValue::from_static("tenant-b"),
    );
    let other_tenant =
        Scope::from_headers("payments", &tenant_b, &[http::header::AUTHORIZATION], None)
            .unwrap()
            .unwrap();
    let key = idemgate::idempotency::key::parse(b"tenant-only", 255).unwrap();
    let fp = fingerprint("");
    s.complete_batch(&[record_for(other_tenant, &key, fp, 60_000)])
        .await
        .unwrap();

    let lookups = Lookups::spawn(s.clone(), 256);
    let asks = (0..40).flat_map(|i| [format!("stored-{i}"), format!("new-{i}")]);
    let asks: Vec<String> = asks.chain(["tenant-only".to_string()]).collect();
    let answers = futures_util::future::join_all(asks.iter().map(|key| {
        let lookups = lookups.clone();
        let rec = record(key, 1);
        async move {
            let r = RecordRef {
                scope: rec.scope,
                id: rec.id,
                route: "payments",
            };
            lookups.lookup(r).await
        }
    }))
    .await;

    for (key, answer) in asks.iter().zip(answers) {
        let found = answer.unwrap_or_else(|e| panic!("{key}: {e}"));
        match key.strip_prefix("stored-") {
            Some(i) => match found {
                Some(Found::Completed {
                    response: StoredRecord::Plain(response),
                    ..
                }) => {
                    assert_eq!(response.body, format!("{{\"n\":{i}}}"), "{key}");
                    assert_eq!(response.status.as_u16(), 200 + i.parse::<u16>().unwrap());
                }
                other => panic!("{key}: {other:?}"),
            },
            None => assert!(found.is_none(), "{key}: {found:?}"),
        }
    }
    let statements = lookups.statements();
    assert!(
        (1..81).contains(&statements),
        "81 lookups at once share statements, ran {statements}"
    );
}

#[tokio::test]
async fn lookup_plan_is_index_scans_even_when_planned_on_an_empty_table() {
    // Postgres caches a generic plan for a prepared statement; made while the table is
    // empty, it must still read by primary key, not scan the table the table grows into.
    let pg = PgServer::start();
    store(&pg).migrate().await.unwrap();
    let client = pg.client().await;
    let lookup = idemgate::testing::store::postgres::lookups::LOOKUP;
    client
        .batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan;
             PREPARE lookup(bytea[], bytea[]) AS {lookup}"
        ))
        .await
        .unwrap();
    let explain = "EXPLAIN EXECUTE lookup(ARRAY['\\x00'::bytea], ARRAY['\\x01'::bytea])";
    let plan: Vec<String> = (client.simple_query(explain).await.unwrap())
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using idemgate_records_pkey") && !plan.contains("Seq Scan"),
        "{plan}"
    );
}
