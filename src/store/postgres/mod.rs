//! Postgres as the durable tier: a pool, the record table's statements (claim, batched
//! completion, release, reap), batched lookups ([`lookups`]) and schema migrations
//! ([`migrate`]).
//!
//! Time is always Postgres' `now()`, so replicas with skewed clocks agree on expiry.

pub mod lookups;
pub mod migrate;
pub mod writer;

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use super::StoreError;
use crate::config::PostgresConfig;
use crate::idempotency::{Fingerprint, RecordId, Release, Scope, StoredResponse};
use crate::metrics;

/// Advisory lock key of the reaper ("idemreap" in ASCII).
const REAP_LOCK: i64 = 0x6964_656d_7265_6170;

/// Which record a statement is about.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub scope: Scope,
    pub id: RecordId,
    pub route: &'a str,
}

/// What Postgres holds for a key (unexpired records only).
#[derive(Debug)]
pub enum Found {
    Completed {
        fingerprint: Fingerprint,
        response: StoredResponse,
        /// Time left before the record expires.
        remaining: Duration,
    },
    Leased {
        fingerprint: Fingerprint,
        /// Time left on the lease.
        remaining: Duration,
    },
}

/// The result of a claim in Postgres.
#[derive(Debug)]
pub enum PgClaim {
    /// This token holds the lease; `fence` is its fencing token.
    Acquired { fence: i64 },
    /// Another record holds the key.
    Held(Found),
}

/// A record as Postgres holds it, for the admin API.
#[derive(Debug, Clone, Copy)]
pub struct PgRecord {
    pub completed: bool,
    pub status: Option<i16>,
    pub stored_bytes: i32,
    pub expires_in_ms: i64,
    pub lease_remaining_ms: Option<i64>,
}

/// A completed response on its way to Postgres.
#[derive(Debug, Clone)]
pub struct CompletedRecord {
    pub scope: Scope,
    pub id: RecordId,
    pub route: String,
    pub fingerprint: Fingerprint,
    pub token: String,
    pub status: i16,
    pub headers: Bytes,
    pub body: Bytes,
    pub ttl_ms: i64,
}

/// The durable tier.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    timeout: Duration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Builds the pool; connections are made lazily, so Postgres need not be up.
    pub fn new(config: &PostgresConfig) -> Result<Self, StoreError> {
        let mut pg: tokio_postgres::Config = (config.url.parse())
            .map_err(|e: tokio_postgres::Error| StoreError::PgPool(e.to_string()))?;
        pg.connect_timeout(config.statement_timeout);
        pg.application_name("idemgate");
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(config.statement_timeout))
            .create_timeout(Some(config.statement_timeout))
            .recycle_timeout(Some(config.statement_timeout))
            .build()
            .map_err(|e| StoreError::PgPool(e.to_string()))?;
        Ok(Self {
            pool,
            timeout: config.statement_timeout,
        })
    }

    /// Runs `work` under the statement timeout.
    async fn timed<T>(
        &self,
        op: &'static str,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, work).await;
        metrics::postgres_op(op, started);
        result.map_err(|_| StoreError::PgTimeout)?
    }

    /// Applies missing migrations (see [`migrate::run`]).
    pub async fn migrate(&self) -> Result<Vec<i32>, StoreError> {
        let mut client = self.pool.get().await?;
        migrate::run(&mut client).await
    }

    /// Fails unless the schema is exactly the one this binary needs.
    pub async fn check_schema(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let database = migrate::current(&client).await?;
        let binary = migrate::latest();
        match database.cmp(&binary) {
            std::cmp::Ordering::Greater => Err(StoreError::SchemaTooNew { database, binary }),
            std::cmp::Ordering::Less => Err(StoreError::SchemaTooOld { database, binary }),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", async {
            self.pool.get().await?.simple_query("SELECT 1").await?;
            Ok(())
        })
        .await
    }

    /// Claims `rec` in Postgres with `token` for `lease`: inserts a leased row, or takes
    /// over an expired one (or one leased by this same token). Acquired carries the
    /// fencing token (at least the database clock in microseconds, and above the
    /// previous one); otherwise what holds the key.
    pub async fn claim(
        &self,
        rec: RecordRef<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
    ) -> Result<PgClaim, StoreError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        for _ in 0..3 {
            let acquired = self
                .timed("claim", async {
                    let client = self.pool.get().await?;
                    let stmt = client
                        .prepare_cached(
                            "INSERT INTO idemgate_records AS r
                               (scope, key_hash, route, fingerprint, state, lock_token,
                                lease_expires_at, created_at, expires_at, fence)
                             VALUES ($1, $2, $3, $4, 'leased', $5,
                                     now() + interval '1 millisecond' * $6::float8, now(),
                                     now() + interval '1 millisecond' * $6::float8,
                                     (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
                             ON CONFLICT (scope, key_hash) DO UPDATE SET
                               fence = CASE WHEN r.lock_token = EXCLUDED.lock_token THEN r.fence
                                            ELSE greatest(r.fence + 1, EXCLUDED.fence) END,
                               route = EXCLUDED.route, fingerprint = EXCLUDED.fingerprint,
                               state = 'leased', lock_token = EXCLUDED.lock_token,
                               lease_expires_at = EXCLUDED.lease_expires_at, status = NULL,
                               headers = NULL, body = NULL, created_at = now(),
                               completed_at = NULL, expires_at = EXCLUDED.expires_at
                             WHERE r.expires_at <= now()
                                OR (r.state = 'leased' AND (r.lease_expires_at <= now()
                                    OR r.lock_token = EXCLUDED.lock_token))
                             RETURNING fence",
                        )
                        .await?;
                    let rows = client
                        .query(
                            &stmt,
                            &[
                                &&rec.scope.as_bytes()[..],
                                &&rec.id.as_bytes()[..],
                                &rec.route,
                                &&fingerprint.as_bytes()[..],
                                &token,
                                &(lease_ms as f64),
                            ],
                        )
                        .await?;
                    Ok(rows.first().map(|r| r.get::<_, i64>(0)))
                })
                .await?;
            if let Some(fence) = acquired {
                return Ok(PgClaim::Acquired { fence });
            }
            // Held by someone else; read what holds it. Gone meanwhile (reaped): try again.
            if let Some(found) = self.lookup(rec).await? {
                return Ok(PgClaim::Held(found));
            }
        }
        Err(StoreError::PgPool(
            "claim raced with expiry three times".into(),
        ))
    }

    /// Writes completed records in one statement. A record is written when its key is
    /// free, expired, or leased by its own token; otherwise left alone (first writer
    /// wins, and a lost lease never overwrites). Returns, per record, whether it was written.
    pub async fn complete_batch(
        &self,
        records: &[CompletedRecord],
    ) -> Result<Vec<bool>, StoreError> {
        let col = |f: fn(&CompletedRecord) -> &[u8]| records.iter().map(f).collect::<Vec<&[u8]>>();
        let scopes = col(|r| &r.scope.as_bytes()[..]);
        let ids = col(|r| &r.id.as_bytes()[..]);
        let fingerprints = col(|r| &r.fingerprint.as_bytes()[..]);
        let headers = col(|r| &r.headers[..]);
        let bodies = col(|r| &r.body[..]);
        let routes: Vec<&str> = records.iter().map(|r| r.route.as_str()).collect();
        let tokens: Vec<&str> = records.iter().map(|r| r.token.as_str()).collect();
        let statuses: Vec<i16> = records.iter().map(|r| r.status).collect();
        let ttls: Vec<i64> = records.iter().map(|r| r.ttl_ms).collect();
        let written: HashSet<Vec<u8>> = self
            .timed("write_through", async {
                let client = self.pool.get().await?;
                let stmt = client
                    .prepare_cached(
                        "INSERT INTO idemgate_records AS r
                           (scope, key_hash, route, fingerprint, state, lock_token, status,
                            headers, body, created_at, completed_at, expires_at)
                         SELECT s, k, rt, f, 'completed', t, st, h, b, now(), now(),
                                now() + interval '1 millisecond' * ttl
                         FROM UNNEST($1::bytea[], $2::bytea[], $3::text[], $4::bytea[],
                                     $5::text[], $6::int2[], $7::bytea[], $8::bytea[],
                                     $9::int8[]) AS u(s, k, rt, f, t, st, h, b, ttl)
                         ON CONFLICT (scope, key_hash) DO UPDATE SET
                           state = 'completed', lock_token = EXCLUDED.lock_token,
                           fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
                           headers = EXCLUDED.headers, body = EXCLUDED.body,
                           lease_expires_at = NULL, completed_at = now(),
                           expires_at = EXCLUDED.expires_at
                         WHERE r.expires_at <= now()
                            OR (r.state = 'leased' AND (r.lock_token = EXCLUDED.lock_token
                                OR r.lease_expires_at <= now()))
                         RETURNING key_hash",
                    )
                    .await?;
                let rows = client
                    .query(
                        &stmt,
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
                Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
            })
            .await?;
        Ok(records
            .iter()
            .map(|r| written.contains(&r.id.as_bytes()[..]))
            .collect())
    }

    /// What Postgres holds for `rec`, expired or not (admin API; not on the request path).
    pub async fn inspect(&self, rec: RecordRef<'_>) -> Result<Option<PgRecord>, StoreError> {
        self.timed("inspect", async {
            let client = self.pool.get().await?;
            let row = client
                .query_opt(
                    "SELECT state, status, coalesce(octet_length(body), 0) + coalesce(octet_length(headers), 0),
                        (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint,
                        (EXTRACT(EPOCH FROM (lease_expires_at - now())) * 1000)::bigint
                     FROM idemgate_records WHERE scope = $1 AND key_hash = $2",
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..]],
                )
                .await?;
            Ok(row.map(|r| PgRecord {
                completed: r.get::<_, &str>(0) == "completed",
                status: r.get(1),
                stored_bytes: r.get(2),
                expires_in_ms: r.get(3),
                lease_remaining_ms: r.get(4),
            }))
        })
        .await
    }

    /// Deletes `rec` unless a live lease holds it and `force` is false (admin API). One
    /// statement decides and deletes: a takeover that commits meanwhile is re-checked by
    /// the `WHERE` (and so kept), the condition being the admin API's "in flight".
    pub async fn invalidate(
        &self,
        rec: RecordRef<'_>,
        force: bool,
    ) -> Result<super::redis::Invalidated, StoreError> {
        use super::redis::Invalidated;
        self.timed("invalidate", async {
            let client = self.pool.get().await?;
            // The sub-select sees the row as it was before the DELETE (same snapshot).
            let row = client
                .query_one(
                    "WITH gone AS (
                       DELETE FROM idemgate_records
                       WHERE scope = $1 AND key_hash = $2
                         AND ($3 OR state = 'completed' OR expires_at <= now()
                              OR coalesce(lease_expires_at <= now(), true))
                       RETURNING 1)
                     SELECT (SELECT count(*) FROM gone),
                            (SELECT coalesce((EXTRACT(EPOCH FROM (lease_expires_at - now()))
                                              * 1000)::bigint, 0)
                             FROM idemgate_records WHERE scope = $1 AND key_hash = $2)",
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &force],
                )
                .await?;
            let (deleted, lease_ms): (i64, Option<i64>) = (row.get(0), row.get(1));
            Ok(match (deleted, lease_ms) {
                (1.., _) => Invalidated::Deleted,
                (_, Some(ms)) => Invalidated::Leased {
                    remaining: Duration::from_millis(ms.max(0) as u64),
                },
                (_, None) => Invalidated::Absent,
            })
        })
        .await
    }

    /// Pushes out `rec`'s lease if `token` still holds it (the holder's heartbeat).
    pub async fn extend(
        &self,
        rec: RecordRef<'_>,
        token: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let lease_ms = lease.as_millis() as f64;
        self.timed("extend", async {
            let client = self.pool.get().await?;
            let stmt = client
                .prepare_cached(
                    "UPDATE idemgate_records
                     SET lease_expires_at = now() + interval '1 millisecond' * $4::float8,
                         expires_at = greatest(expires_at, now() + interval '1 millisecond' * $4::float8)
                     WHERE scope = $1 AND key_hash = $2 AND state = 'leased' AND lock_token = $3",
                )
                .await?;
            let n = client
                .execute(&stmt, &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &token, &lease_ms])
                .await?;
            Ok(n == 1)
        })
        .await
    }

    /// Deletes `rec`'s lease if `token` holds it.
    pub async fn release(&self, rec: RecordRef<'_>, token: &str) -> Result<Release, StoreError> {
        self.timed("release", async {
            let client = self.pool.get().await?;
            let stmt = client
                .prepare_cached(
                    "DELETE FROM idemgate_records
                     WHERE scope = $1 AND key_hash = $2 AND state = 'leased' AND lock_token = $3",
                )
                .await?;
            let n = client
                .execute(
                    &stmt,
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &token],
                )
                .await?;
            Ok(if n == 1 {
                Release::Released
            } else {
                Release::NotHeld
            })
        })
        .await
    }

    /// One reaper pass: deletes expired records in batches of `batch`, unless another
    /// replica is reaping (advisory lock). Returns rows deleted, or `None` if skipped.
    pub async fn reap(&self, batch: usize) -> Result<Option<u64>, StoreError> {
        let started = Instant::now();
        let client = self.pool.get().await?;
        let locked: bool = (client.query_one("SELECT pg_try_advisory_lock($1)", &[&REAP_LOCK]))
            .await?
            .get(0);
        if !locked {
            return Ok(None);
        }
        let mut total = 0;
        let result = async {
            loop {
                let n = client
                    .execute(
                        "DELETE FROM idemgate_records WHERE ctid IN (
                           SELECT ctid FROM idemgate_records WHERE expires_at <= now()
                           ORDER BY expires_at LIMIT $1)",
                        &[&(batch as i64)],
                    )
                    .await?;
                total += n;
                if n < batch as u64 {
                    return Ok::<_, StoreError>(());
                }
            }
        }
        .await;
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&REAP_LOCK])
            .await?;
        metrics::postgres_op("reap", started);
        metrics::reaped(total);
        result.map(|()| Some(total))
    }
}
