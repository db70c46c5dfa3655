//! Records for the Postgres store's tests: keys under one anonymous scope on the route
//! "payments", a POST's fingerprint, completed records as the write-through writes them,
//! and stores on a test server.

use std::time::Duration;

use bytes::Bytes;
use idemgate::config::PostgresConfig;
use idemgate::idempotency::{Fingerprint, RecordId, Scope};
use idemgate::testing::store::postgres::{CompletedRecord, RecordRef};
use idemgate::testing::store::PgStore;

use super::PgServer;

/// A store on `pg` with the default settings (nothing connects until it is used).
pub fn store(pg: &PgServer) -> PgStore {
    PgStore::new(&PostgresConfig {
        url: pg.url(),
        ..PostgresConfig::default()
    })
    .unwrap()
}

/// A store on `url` whose statements time out after `statement_timeout`.
pub fn store_at(url: String, statement_timeout: Duration) -> PgStore {
    PgStore::new(&PostgresConfig {
        url,
        statement_timeout,
        ..PostgresConfig::default()
    })
    .unwrap()
}

/// A migrated store on `url` of `sessions` pooled sessions (one: every statement goes
/// to the same session, whose prepared statements a test can then read).
pub async fn migrated_store(url: String, sessions: usize) -> PgStore {
    let s = PgStore::new(&PostgresConfig {
        url,
        pool_size: sessions,
        ..PostgresConfig::default()
    })
    .unwrap();
    s.migrate().await.unwrap();
    s
}

/// The scope every record here lives in: route "payments", no tenant.
pub fn scope() -> Scope {
    Scope::anonymous("payments", &[http::header::AUTHORIZATION], None)
}

/// The record id of the idempotency key `key` in [`scope`].
pub fn id(key: &str) -> RecordId {
    let key = idemgate::idempotency::key::parse(key.as_bytes(), 255).unwrap();
    RecordId::new(scope(), &key, None)
}

pub fn rec(key: &str) -> RecordRef<'static> {
    RecordRef {
        scope: scope(),
        id: id(key),
        route: "payments",
    }
}

/// Where a completed record lives.
pub fn rec_of(r: &CompletedRecord) -> RecordRef<'_> {
    RecordRef {
        scope: r.scope,
        id: r.id,
        route: &r.route,
    }
}

/// The fingerprint of a `POST /v1/x` with `body`.
pub fn fingerprint(body: impl AsRef<[u8]>) -> Fingerprint {
    Fingerprint::new(
        &Default::default(),
        &http::Method::POST,
        &"/v1/x".parse().unwrap(),
        &http::HeaderMap::new(),
        body.as_ref(),
    )
}

/// The completed record of `key` (201, body `{}`, no headers, token "t", the fingerprint
/// of an empty POST) living `ttl_ms`.
pub fn completed(key: &str, ttl_ms: i64) -> CompletedRecord {
    CompletedRecord {
        scope: scope(),
        id: id(key),
        route: "payments".into(),
        fingerprint: fingerprint(""),
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
