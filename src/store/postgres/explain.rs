//! `idemgate explain`: how this deployment's Postgres runs the statements of a durable
//! first execution (the claim, the write-through that completes it, the lookup), as
//! `EXPLAIN (ANALYZE, BUFFERS, WAL)` of the very statements the gateway prepares, for
//! fresh keys, inside a transaction that is rolled back: nothing stays written.
//!
//! The plans answer what a benchmark's CPU figure cannot: how many buffers a round
//! touches on the table as it is (its size, its indexes, its fill), how much WAL it
//! writes, and whether the claim's completion stays a HOT update.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::completions::WRITE_THROUGH;
use super::leases::CLAIM;
use super::lookups::LOOKUP;
use super::PgStore;
use crate::store::StoreError;

/// Most keys one explained round may hold (a round of the gateway's batchers is far
/// smaller; this only bounds what an operator can ask for).
pub const MAX_KEYS: usize = 1000;

/// The plan of one statement: its name and `EXPLAIN`'s lines.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `claim`, `write-through` or `lookup`.
    pub statement: &'static str,
    pub lines: Vec<String>,
}

impl PgStore {
    /// `EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF)` of a round of `keys` fresh keys
    /// (at most [`MAX_KEYS`]) claimed with a 30 s lease and a one-day `ttl`, completed
    /// by the write-through (40 bytes of headers, a 150-byte body), then looked up, in
    /// one transaction that is rolled back. The keys are random, under the scope of a
    /// record already in the table (a tenant's, so they land among that tenant's keys as
    /// its first executions would; a random scope on an empty table). The statements run
    /// for real, so their locks, buffers and WAL are those of the gateway's rounds; the
    /// plans come back in that order.
    pub async fn explain_first_execution(&self, keys: usize) -> Result<Vec<Plan>, StoreError> {
        let n = keys.clamp(1, MAX_KEYS);
        // Keys spread over the key space as the gateway's SHA-256 ids are.
        let fresh = || Sha256::digest(uuid::Uuid::new_v4().as_bytes()).to_vec();
        let ids: Vec<Vec<u8>> = (0..n).map(|_| fresh()).collect();
        let routes = vec!["explain"; n];
        let fingerprints: Vec<Vec<u8>> = (0..n).map(|_| vec![0; 32]).collect();
        let tokens: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let lease_ms = vec![Duration::from_secs(30).as_millis() as f64; n];
        let ttl = Duration::from_secs(86_400).as_millis();
        let least_ms = vec![(Duration::from_secs(30).as_millis() + ttl) as f64; n];
        let requests: Vec<Option<&[u8]>> = vec![None; n];
        let completers: Vec<Option<&str>> = vec![None; n];
        let statuses = vec![201_i16; n];
        let headers = vec![&[0_u8; 40][..]; n];
        let bodies = vec![&[b'x'; 150][..]; n];
        let ttls = vec![ttl as i64; n];

        self.timed("explain", async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let scope: Vec<u8> = (tx.query_opt("SELECT scope FROM idemgate_records LIMIT 1", &[]))
                .await?
                .map_or_else(fresh, |row| row.get(0));
            let scopes = vec![scope; n];
            let explain = |sql: &str| format!("EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) {sql}");
            let mut plans = Vec::with_capacity(3);
            let claim = tx
                .query(
                    &explain(CLAIM),
                    &[
                        &scopes,
                        &ids,
                        &routes,
                        &fingerprints,
                        &tokens,
                        &lease_ms,
                        &requests,
                        &least_ms,
                        &completers,
                    ],
                )
                .await?;
            plans.push(Plan::of("claim", claim));
            let completion = tx
                .query(
                    &explain(WRITE_THROUGH),
                    &[
                        &scopes,
                        &ids,
                        &routes,
                        &fingerprints,
                        &tokens,
                        &statuses,
                        &headers,
                        &bodies,
                        &ttls,
                    ],
                )
                .await?;
            plans.push(Plan::of("write-through", completion));
            let lookup = tx.query(&explain(LOOKUP), &[&scopes, &ids]).await?;
            plans.push(Plan::of("lookup", lookup));
            tx.rollback().await?;
            Ok(plans)
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
