//! Leases held in Postgres: the claim, the holder's heartbeat and the release.
//!
//! A claim whose outcome is unknown (no answer within the client's timeout, or the
//! connection lost after it was sent) may have committed, while its caller was told it
//! failed: nobody would ever release that lease, and the key would answer 409 until it
//! expired. Such a claim's token is released in the background, as the Redis path does;
//! a release is compare-and-delete on the token, so it is harmless if the claim never
//! landed. It goes first on the claim's own session, where Postgres runs it only after
//! the claim ended, committed or not; if that session is lost, from another one once
//! the server's statement timeout has ended the claim, until the lease would have
//! expired anyway.

use std::time::Duration;

use deadpool_postgres::Object;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use super::{timed_out, PgClaim, PgStore, RecordRef};
use crate::idempotency::{Fingerprint, RecordId, Release, Scope};
use crate::metrics;
use crate::store::StoreError;

/// Inserts a leased row, or takes over an expired one (or one leased by the same token).
const CLAIM: &str = "INSERT INTO idemgate_records AS r
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
     RETURNING fence";

const RELEASE: &str = "DELETE FROM idemgate_records
     WHERE scope = $1 AND key_hash = $2 AND state = 'leased' AND lock_token = $3";

impl PgStore {
    /// Claims `rec` in Postgres with `token` for `lease`: inserts a leased row, or takes
    /// over an expired one (or one leased by this same token). Acquired carries the
    /// fencing token (at least the database clock in microseconds, and above the
    /// previous one); otherwise what holds the key. On an error, the token holds nothing
    /// (or will not for long: see the module docs).
    pub async fn claim(
        &self,
        rec: RecordRef<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
    ) -> Result<PgClaim, StoreError> {
        for _ in 0..3 {
            if let Some(fence) = self.try_claim(rec, fingerprint, token, lease).await? {
                return Ok(PgClaim::Acquired { fence });
            }
            // Held by someone else; read what holds it. Gone meanwhile (reaped): try again.
            if let Some(found) = self.lookup(rec).await? {
                return Ok(PgClaim::Held(found));
            }
        }
        Err(StoreError::ClaimRaced)
    }

    /// One claim statement: the new fence, or `None` when the key is held.
    async fn try_claim(
        &self,
        rec: RecordRef<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
    ) -> Result<Option<i64>, StoreError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX) as f64;
        let started = Instant::now();
        let deadline = started + self.client_timeout;
        let client = match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(client) => client?,
            Err(_) => return Err(StoreError::PgTimeout), // nothing was sent
        };
        let answer = tokio::time::timeout_at(deadline, async {
            let stmt = client.prepare_cached(CLAIM).await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                &&rec.scope.as_bytes()[..],
                &&rec.id.as_bytes()[..],
                &rec.route,
                &&fingerprint.as_bytes()[..],
                &token,
                &lease_ms,
            ];
            client.query(&stmt, &params).await
        })
        .await;
        metrics::postgres_op("claim", started.into_std());
        match answer {
            Ok(Ok(rows)) => Ok(rows.first().map(|r| r.get::<_, i64>(0))),
            // Postgres answered with an error: the statement did not commit.
            Ok(Err(e)) if e.as_db_error().is_some() => Err(timed_out(e.into())),
            Ok(Err(e)) => {
                self.release_unknown(client, rec, token, lease);
                Err(e.into())
            }
            Err(_) => {
                self.release_unknown(client, rec, token, lease);
                Err(StoreError::PgTimeout)
            }
        }
    }

    /// Releases `token`'s claim of `rec`, whose outcome is unknown, in the background:
    /// on `client` (the claim's session) first, then on others (see the module docs).
    fn release_unknown(&self, client: Object, rec: RecordRef<'_>, token: &str, lease: Duration) {
        let (store, scope, id, token) = (self.clone(), rec.scope, rec.id, token.to_string());
        tokio::spawn(async move {
            let until = Instant::now() + lease;
            // Unprepared, so that it goes out at once even while the session's answers
            // are late: one round trip, no statement to prepare first.
            let same_session = tokio::time::timeout(
                store.client_timeout * 2,
                client.execute_typed(
                    RELEASE,
                    &[
                        (&&scope.as_bytes()[..], Type::BYTEA),
                        (&&id.as_bytes()[..], Type::BYTEA),
                        (&token, Type::TEXT),
                    ],
                ),
            )
            .await;
            if let Ok(Ok(n)) = same_session {
                let released = if n == 1 {
                    Release::Released
                } else {
                    Release::NotHeld
                };
                return released_unknown(&id, released);
            }
            // A session that does not answer leaves the pool (closing it ends its backend).
            drop(Object::take(client));
            while Instant::now() + store.timeout < until {
                tokio::time::sleep(store.timeout).await;
                let released = store
                    .timed("release", async {
                        release_on(&*store.pool.get().await?, &scope, &id, &token).await
                    })
                    .await;
                if let Ok(released) = released {
                    return released_unknown(&id, released);
                }
            }
            tracing::warn!(key_hash = %id.short(), "could not release a postgres claim whose \
                outcome is unknown; it ends when its lease expires");
        });
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
            release_on(&*self.pool.get().await?, &rec.scope, &rec.id, token).await
        })
        .await
    }
}

/// Deletes the lease of `(scope, id)` if `token` holds it, on `client`.
async fn release_on(
    client: &deadpool_postgres::ClientWrapper,
    scope: &Scope,
    id: &RecordId,
    token: &str,
) -> Result<Release, StoreError> {
    let stmt = client.prepare_cached(RELEASE).await?;
    let n = client
        .execute(
            &stmt,
            &[&&scope.as_bytes()[..], &&id.as_bytes()[..], &token],
        )
        .await?;
    Ok(if n == 1 {
        Release::Released
    } else {
        Release::NotHeld
    })
}

fn released_unknown(id: &RecordId, released: Release) {
    if released == Release::Released {
        tracing::info!(key_hash = %id.short(), "released a postgres claim whose answer was \
            lost: it had committed after its caller gave up on it");
    }
}
