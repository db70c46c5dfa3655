//! `idemgate explain`: how this deployment's Postgres runs the statements of a durable
//! first execution (the claim, the write-through that completes it, the lookup), as
//! `EXPLAIN (ANALYZE, BUFFERS, WAL)` of the very statements the gateway prepares, for
//! fresh keys, inside a transaction that is rolled back: nothing stays written.
//!
//! The plans answer what a benchmark's CPU figure cannot: how many buffers a round
//! touches on the table as it is (its size, its indexes, its fill), how much WAL it
//! writes, and whether the claim's completion stays a HOT update.

use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::claim_asks::{ClaimAsk, ClaimColumns};
use super::completions::{Columns, INSERT_NEW, WRITE_THROUGH};
use super::leases::CLAIM;
use super::lookups::LOOKUP;
use super::{CompletedRecord, PgStore};
use crate::idempotency::{Expiry, Fingerprint, RecordId, Scope};
use crate::store::StoreError;

/// Most keys one explained round may hold (a round of the gateway's batchers is far
/// smaller; this only bounds what an operator can ask for).
pub const MAX_KEYS: usize = 1000;

/// The plan of one statement: its name and `EXPLAIN`'s lines.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `claim`, `write-through`, `lookup` or `insert-new`.
    pub statement: &'static str,
    pub lines: Vec<String>,
}

impl PgStore {
    /// `EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF)` of a round of `keys` fresh keys
    /// (at most [`MAX_KEYS`]) claimed with a 30 s lease and a one-day `ttl`, completed
    /// by the write-through (40 bytes of headers, a 150-byte body), then looked up, and
    /// as many other fresh keys completed after claims Redis held alone (the plain
    /// insert), in one transaction that is rolled back. The keys are random, under the
    /// scope of a record already in the table (a tenant's, so they land among that
    /// tenant's keys as its first executions would; a random scope on an empty table).
    /// The statements run for real, so their locks, buffers and WAL are those of the
    /// gateway's rounds; the plans come back in that order.
    pub async fn explain_first_execution(&self, keys: usize) -> Result<Vec<Plan>, StoreError> {
        let n = keys.clamp(1, MAX_KEYS);
        // Keys spread over the key space as the gateway's SHA-256 ids are.
        let fresh = || Sha256::digest(uuid::Uuid::new_v4().as_bytes());
        let lease = Duration::from_secs(30);
        let ttl = Duration::from_secs(86_400);
        self.timed("explain", |mut client| async move {
            let tx = client.transaction().await?;
            let scope = (tx.query_opt("SELECT scope FROM idemgate_records LIMIT 1", &[]))
                .await?
                .and_then(|row| Scope::from_bytes(row.get(0)))
                .or_else(|| Scope::from_bytes(&fresh()))
                .expect("a SHA-256 digest is a scope");
            // The rows the gateway's own parameter builders turn into statement arrays.
            let asks: Vec<ClaimAsk> = (0..n)
                .map(|_| ClaimAsk {
                    scope,
                    id: RecordId::from_bytes(&fresh()).expect("a SHA-256 digest is an id"),
                    route: "explain".into(),
                    fingerprint: Fingerprint::from_bytes(&[0; 32]).expect("32 bytes"),
                    token: uuid::Uuid::new_v4().to_string(),
                    lease,
                    ttl,
                    resend: None,
                })
                .collect();
            let records: Vec<CompletedRecord> = (asks.iter())
                .map(|a| CompletedRecord {
                    scope: a.scope,
                    id: a.id,
                    route: a.route.clone(),
                    fingerprint: a.fingerprint,
                    token: a.token.clone(),
                    status: 201,
                    headers: Bytes::from_static(&[0; 40]),
                    body: Bytes::from_static(&[b'x'; 150]),
                    expiry: Expiry::after(ttl),
                    origin: None,
                    claimed_in_postgres: true,
                })
                .collect();
            let explain = |sql: &str| format!("EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) {sql}");
            let asks: Vec<&ClaimAsk> = asks.iter().collect();
            let claim = ClaimColumns::of(&asks);
            let claim = tx.query(&explain(CLAIM), &claim.params()).await?;
            let records: Vec<&CompletedRecord> = records.iter().collect();
            let completion = Columns::of(&records);
            let completion = tx
                .query(&explain(WRITE_THROUGH), &completion.params())
                .await?;
            let scopes = vec![&scope.as_bytes()[..]; n];
            let ids: Vec<&[u8]> = records.iter().map(|r| &r.id.as_bytes()[..]).collect();
            let lookup = tx.query(&explain(LOOKUP), &[&scopes, &ids]).await?;
            // As many other fresh keys completed after claims Redis held alone.
            let unclaimed: Vec<CompletedRecord> = (records.iter())
                .map(|r| CompletedRecord {
                    id: RecordId::from_bytes(&fresh()).expect("a SHA-256 digest is an id"),
                    claimed_in_postgres: false,
                    ..(*r).clone()
                })
                .collect();
            let unclaimed: Vec<&CompletedRecord> = unclaimed.iter().collect();
            let insert = Columns::of(&unclaimed);
            let insert = tx.query(&explain(INSERT_NEW), &insert.params()).await?;
            tx.rollback().await?;
            Ok(vec![
                Plan::of("claim", claim),
                Plan::of("write-through", completion),
                Plan::of("lookup", lookup),
                Plan::of("insert-new", insert),
            ])
        })
        .await
    }
}

impl Plan {
    fn of(statement: &'static str, rows: Vec<tokio_postgres::Row>) -> Self {
        Self {
            statement,
            lines: rows.iter().map(|r| r.get::<_, String>(0)).collect(),
        }
    }
}
