//! Postgres as the durable tier: a pool, the record table's statements (batched
//! completion and the reaper here; claim, heartbeat and release in [`leases`]), batched
//! claims ([`claims`]) and lookups ([`lookups`]), the write-through writer ([`writer`])
//! and schema migrations ([`migrate`]).
//!
//! Time is always Postgres' `now()`, so replicas with skewed clocks agree on expiry.
//!
//! Every session carries `statement_timeout` (set when it connects), so Postgres itself
//! ends a statement that runs too long: a statement the client gave up on does not go on
//! to commit later. The client waits a little longer than that (a backstop for a server
//! or network that does not answer at all); a statement whose answer it never got has an
//! unknown outcome, which the claim path resolves by releasing its token ([`leases`]).

mod batcher;
pub mod claims;
pub mod completer;
pub mod leases;
pub mod lookups;
pub mod migrate;
pub mod writer;

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

use super::StoreError;
use crate::config::PostgresConfig;
use crate::idempotency::{Encoded, Fingerprint, RecordId, Scope, StoredRecord};
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
        /// As stored: maybe sealed.
        response: StoredRecord,
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
    /// What the completer did with it (the `completer` column), if anything.
    pub completer: Option<CompleterMark>,
    /// Attempts the completer reserved for its kept request.
    pub completer_attempts: Option<i32>,
    /// Whether a request is kept with its lease for the completer.
    pub request_kept: bool,
}

/// A row's `completer` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleterMark {
    /// The completer holds (or held) the lease.
    Running,
    /// The completer completed it.
    Completed,
    /// The completer gave it up.
    GivenUp,
}

impl CompleterMark {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "completed" => Some(Self::Completed),
            "given_up" => Some(Self::GivenUp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::GivenUp => "given_up",
        }
    }
}

/// `status` of a row whose response is sealed (not an HTTP status, so a binary that
/// predates encryption refuses the row as corrupt instead of replaying it): `headers`
/// is empty and `body` holds the sealed record, the same bytes Redis holds.
pub const SEALED_STATUS: i16 = 0;

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

/// The `status`, `headers` and `body` columns of a response: its parts, or, when it
/// is `sealed`, [`SEALED_STATUS`], nothing, and the sealed bytes.
pub fn stored_columns(response: &Encoded, sealed: Option<Bytes>) -> (i16, Bytes, Bytes) {
    match sealed {
        Some(sealed) => (SEALED_STATUS, Bytes::new(), sealed),
        None => (
            response.compact.status.as_u16() as i16,
            response.header_block(),
            response.compact.body.clone(),
        ),
    }
}

/// A row's `state` column: the one place its text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Leased,
    Completed,
}

impl RecordState {
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "leased" => Ok(Self::Leased),
            "completed" => Ok(Self::Completed),
            _ => Err(StoreError::Corrupt("record state")),
        }
    }
}

/// The durable tier.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// `statement_timeout` of every session: Postgres ends a statement after it.
    timeout: Duration,
    /// How long the client waits for an answer: `timeout` plus a margin, so that the
    /// server's timeout normally fires first and the outcome is known.
    client_timeout: Duration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Builds the pool; connections are made lazily, so Postgres need not be up.
    pub fn new(config: &PostgresConfig) -> Result<Self, StoreError> {
        let (mut pg, tls) = crate::tls::postgres::session(config).map_err(StoreError::PgConfig)?;
        pg.connect_timeout(config.statement_timeout);
        pg.application_name("idemgate");
        let ms = config.statement_timeout.as_millis().max(1);
        let options = match pg.get_options() {
            Some(given) if !given.trim().is_empty() => format!("{given} -c statement_timeout={ms}"),
            _ => format!("-c statement_timeout={ms}"),
        };
        pg.options(options);
        let manager = Manager::from_config(
            pg,
            tls,
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
            .map_err(|e| StoreError::PgConfig(e.to_string()))?;
        Ok(Self {
            pool,
            timeout: config.statement_timeout,
            client_timeout: client_timeout(config.statement_timeout),
        })
    }

    /// Runs `work` under the client's timeout.
    async fn timed<T>(
        &self,
        op: &'static str,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.client_timeout, work).await;
        metrics::postgres_op(op, started);
        result
            .map_err(|_| StoreError::PgTimeout)?
            .map_err(timed_out)
    }

    /// Applies missing migrations (see [`migrate::run`]), in a session of their own that
    /// is closed afterwards: a migration (or waiting for another replica's) may take
    /// longer than the statement timeout, and nothing it sets or holds goes back to the pool.
    pub async fn migrate(&self) -> Result<Vec<i32>, StoreError> {
        let mut client = Object::take(self.pool.get().await?);
        client.batch_execute("SET statement_timeout = 0").await?;
        migrate::run(&mut client).await
    }

    /// Fails unless the schema is the one this binary needs, or newer only by
    /// additive migrations ([`migrate::ADDITIVE`]).
    pub async fn check_schema(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let (database, required) = migrate::current(&client).await?;
        let binary = migrate::latest();
        if required > binary {
            Err(StoreError::SchemaTooNew { database, binary })
        } else if database < binary {
            Err(StoreError::SchemaTooOld { database, binary })
        } else {
            Ok(())
        }
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", async {
            self.pool.get().await?.simple_query("SELECT 1").await?;
            Ok(())
        })
        .await
    }

    /// Writes completed records in one statement. A record is written when its key is
    /// free, expired, or leased by its own token; otherwise left alone (first writer
    /// wins, and a lost lease never overwrites). Returns, per record, whether it was written.
    pub async fn complete_batch(
        &self,
        records: &[CompletedRecord],
    ) -> Result<Vec<bool>, StoreError> {
        // Rows in key order, as the claim rounds take theirs (`leases`): a batch of
        // completions and a round of claims crossing on two keys wait for each other
        // instead of deadlocking.
        let mut sorted: Vec<&CompletedRecord> = records.iter().collect();
        sorted.sort_unstable_by(|a, b| {
            (a.scope.as_bytes(), a.id.as_bytes()).cmp(&(b.scope.as_bytes(), b.id.as_bytes()))
        });
        let col =
            |f: fn(&CompletedRecord) -> &[u8]| sorted.iter().map(|r| f(r)).collect::<Vec<&[u8]>>();
        let scopes = col(|r| &r.scope.as_bytes()[..]);
        let ids = col(|r| &r.id.as_bytes()[..]);
        let fingerprints = col(|r| &r.fingerprint.as_bytes()[..]);
        let headers = col(|r| &r.headers[..]);
        let bodies = col(|r| &r.body[..]);
        let routes: Vec<&str> = sorted.iter().map(|r| r.route.as_str()).collect();
        let tokens: Vec<&str> = sorted.iter().map(|r| r.token.as_str()).collect();
        let statuses: Vec<i16> = sorted.iter().map(|r| r.status).collect();
        let ttls: Vec<i64> = sorted.iter().map(|r| r.ttl_ms).collect();
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
                           expires_at = EXCLUDED.expires_at, request = NULL,
                           completer = CASE WHEN r.state = 'leased' AND r.completer = 'running'
                                 AND r.lock_token = EXCLUDED.lock_token THEN 'completed' END
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
                    "SELECT state, nullif(status, 0::int2), coalesce(octet_length(body), 0) + coalesce(octet_length(headers), 0),
                        (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint,
                        (EXTRACT(EPOCH FROM (lease_expires_at - now())) * 1000)::bigint,
                        completer, completer_attempts, request IS NOT NULL
                     FROM idemgate_records WHERE scope = $1 AND key_hash = $2",
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..]],
                )
                .await?;
            row.map(|r| {
                Ok(PgRecord {
                    completed: RecordState::parse(r.get(0))? == RecordState::Completed,
                    status: r.get(1),
                    stored_bytes: r.get(2),
                    expires_in_ms: r.get(3),
                    lease_remaining_ms: r.get(4),
                    completer: r.get::<_, Option<&str>>(5).and_then(CompleterMark::parse),
                    completer_attempts: r.get(6),
                    request_kept: r.get(7),
                })
            })
            .transpose()
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

    /// One reaper pass: deletes expired records in batches of `batch`, unless another
    /// replica is reaping (advisory lock). Returns rows deleted, or `None` if skipped.
    ///
    /// Each batch is a transaction that first takes the reaper's advisory lock with
    /// `pg_try_advisory_xact_lock`. The lock ends with its transaction however that ends
    /// (commit, rollback, a statement Postgres cancelled at its `statement_timeout`, a
    /// session closed), so no failure can leave it held by a pooled session and stop the
    /// reaper of every replica. A batch is bounded by the session's statement timeout
    /// and by the client's; a batch the client gave up on takes its session out of the pool.
    pub async fn reap(&self, batch: usize) -> Result<Option<u64>, StoreError> {
        let started = Instant::now();
        let mut total = 0;
        let result = loop {
            match self.reap_batch(batch).await {
                Ok(None) if total == 0 => break Ok(None),
                // Another replica took the lock between two batches: it carries on.
                Ok(None) => break Ok(Some(total)),
                Ok(Some(n)) => {
                    total += n;
                    if n < batch as u64 {
                        break Ok(Some(total));
                    }
                }
                Err(e) => break Err(e),
            }
        };
        metrics::postgres_op("reap", started);
        metrics::reaped(total);
        result
    }

    /// One batch in a transaction of its own, under the reaper lock: rows deleted, or
    /// `None` when another replica holds the lock.
    async fn reap_batch(&self, batch: usize) -> Result<Option<u64>, StoreError> {
        let deadline = tokio::time::Instant::now() + self.client_timeout;
        let mut client = match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(client) => client?,
            Err(_) => return Err(StoreError::PgTimeout),
        };
        let answer = tokio::time::timeout_at(deadline, async {
            let tx = client.transaction().await?;
            let locked: bool = (tx
                .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&REAP_LOCK]))
            .await?
            .get(0);
            if !locked {
                return Ok(None); // dropping the transaction rolls it back
            }
            let n = tx
                .execute(
                    "DELETE FROM idemgate_records WHERE ctid IN (
                       SELECT ctid FROM idemgate_records WHERE expires_at <= now()
                       ORDER BY expires_at LIMIT $1)",
                    &[&(batch as i64)],
                )
                .await?;
            tx.commit().await?;
            Ok(Some(n))
        })
        .await;
        match answer {
            Ok(result) => result.map_err(timed_out),
            Err(_) => {
                // The rollback is queued on the session, which is closed rather than
                // pooled: its transaction, and the lock, end as soon as Postgres gets that
                // far (the statement timeout bounds how long that can take).
                drop(Object::take(client));
                Err(StoreError::PgTimeout)
            }
        }
    }
}

/// The client's deadline for a statement: the server's, plus a quarter of it (at least
/// 50 ms, at most 1 s) for the answer to arrive.
fn client_timeout(server: Duration) -> Duration {
    server + (server / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// A statement Postgres cancelled (its `statement_timeout`) timed out, like one the
/// client gave up on; every other error keeps its source.
fn timed_out(e: StoreError) -> StoreError {
    match e {
        StoreError::Pg(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => StoreError::PgTimeout,
        other => other,
    }
}
