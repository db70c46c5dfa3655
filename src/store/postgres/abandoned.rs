//! The completer's statements: find the requests abandoned with a durable lease (a
//! resendable request, the lease expired more than the grace period ago), reserve a batch of
//! them for one attempt each, give up on those out of attempts, and hand a lease back
//! after an attempt that got no answer from the upstream.
//!
//! Finding and reserving is one transaction under the completer's advisory lock
//! (`pg_try_advisory_xact_lock`, as the reaper does), so one replica at a time picks
//! rows, and a row reserved is not picked again before its next attempt is due
//! (`completer_next_at`, doubling with every attempt). The reservation decides nothing
//! about who runs the request: the takeover itself is the claim a client's retry makes
//! ([`super::leases`]), a compare-and-set on the expired lease.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{PgStore, RecordRef};
use crate::idempotency::{Fingerprint, RecordId, Scope};
use crate::metrics;
use crate::store::StoreError;

/// Advisory lock key of the completer ("idemcomp" in ASCII).
const COMPLETE_LOCK: i64 = 0x6964_656d_636f_6d70;

/// Rows whose lease expired more than `$1` ms ago with a request kept.
const ABANDONED: &str = "state = 'leased' AND request IS NOT NULL
       AND lease_expires_at < now() - interval '1 millisecond' * $1::float8
       AND coalesce(completer_next_at, '-infinity') <= now()";

/// An abandoned request, reserved for one attempt.
#[derive(Debug, Clone)]
pub struct Abandoned {
    pub scope: Scope,
    pub id: RecordId,
    pub route: String,
    pub fingerprint: Fingerprint,
    /// The resendable request, as stored (maybe sealed).
    pub request: Bytes,
    /// Attempts so far, this one included.
    pub attempt: i32,
}

impl Abandoned {
    pub fn rec(&self) -> RecordRef<'_> {
        RecordRef {
            scope: self.scope,
            id: self.id,
            route: &self.route,
        }
    }
}

/// What one pass found.
#[derive(Debug, Default)]
pub struct Found {
    /// Out of attempts: marked given up (resendable request deleted), to be counted and logged.
    pub given_up: Vec<(RecordId, String)>,
    /// Reserved for an attempt now.
    pub reserved: Vec<Abandoned>,
}

/// How one pass is bounded.
#[derive(Debug, Clone, Copy)]
pub struct PassLimits {
    pub grace: Duration,
    pub batch: usize,
    pub attempts: u32,
    /// The first pause before an attempt is tried again; doubles with each attempt.
    pub backoff: Duration,
}

impl PgStore {
    /// One completer pass over Postgres: `None` when another replica holds the lock.
    pub async fn abandoned(&self, limits: PassLimits) -> Result<Option<Found>, StoreError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.client_timeout;
        let mut client = self.checkout(deadline).await?;
        let grace = limits.grace.as_millis() as f64;
        let backoff = limits.backoff.as_millis() as f64;
        let max = i32::try_from(limits.attempts).unwrap_or(i32::MAX);
        let answer = tokio::time::timeout_at(deadline, async {
            let tx = client.transaction().await?;
            let locked: bool = (tx
                .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&COMPLETE_LOCK]))
            .await?
            .get(0);
            if !locked {
                return Ok(None);
            }
            let given_up = tx
                .query(
                    &format!(
                        "UPDATE idemgate_records SET completer = 'given_up', request = NULL
                         WHERE {ABANDONED} AND coalesce(completer_attempts, 0) >= $2
                         RETURNING key_hash, route"
                    ),
                    &[&grace, &max],
                )
                .await?;
            let reserved = tx
                .query(
                    &format!(
                        "UPDATE idemgate_records r
                         SET completer_attempts = coalesce(r.completer_attempts, 0) + 1,
                             completer_next_at = now() + interval '1 millisecond' * $3::float8
                                 * power(2, least(coalesce(r.completer_attempts, 0), 16))
                         WHERE r.ctid IN (
                           SELECT ctid FROM idemgate_records
                           WHERE {ABANDONED} AND coalesce(completer_attempts, 0) < $2
                           ORDER BY lease_expires_at LIMIT $4
                           FOR UPDATE SKIP LOCKED)
                         RETURNING r.scope, r.key_hash, r.route, r.fingerprint, r.request,
                                   r.completer_attempts"
                    ),
                    &[&grace, &max, &backoff, &(limits.batch as i64)],
                )
                .await?;
            tx.commit().await?;
            decode_pass(&given_up, &reserved).map(Some)
        })
        .await;
        metrics::postgres_op("completer_pass", started);
        match answer {
            Ok(result) => self.answered(result),
            Err(_) => {
                self.no_answer(deadpool_postgres::Object::metrics(&client).created);
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::PgTimeout)
            }
        }
    }

    /// Ends `token`'s lease on `rec` now, keeping the row and its resendable request: an
    /// attempt that got no answer from the upstream, tried again when its backoff ends.
    pub async fn hand_back(&self, rec: RecordRef<'_>, token: &str) -> Result<bool, StoreError> {
        self.timed("hand_back", |client| async move {
            let n = client
                .execute(
                    "UPDATE idemgate_records SET lease_expires_at = least(lease_expires_at, now())
                     WHERE scope = $1 AND key_hash = $2 AND state = 'leased' AND lock_token = $3",
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &token],
                )
                .await?;
            Ok(n == 1)
        })
        .await
    }

    /// Gives `rec` up now (its resendable request cannot be read): marked, the request
    /// deleted, the lease (`token`'s) ended.
    pub async fn give_up(&self, rec: RecordRef<'_>, token: &str) -> Result<bool, StoreError> {
        self.timed("give_up", |client| async move {
            let n = client
                .execute(
                    "UPDATE idemgate_records SET completer = 'given_up', request = NULL,
                         lease_expires_at = least(lease_expires_at, now())
                     WHERE scope = $1 AND key_hash = $2 AND state = 'leased' AND lock_token = $3",
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &token],
                )
                .await?;
            Ok(n == 1)
        })
        .await
    }
}

fn record_id(bytes: &[u8]) -> Result<RecordId, StoreError> {
    RecordId::from_bytes(bytes).ok_or(StoreError::Corrupt("record id"))
}

/// A pass's rows: the records given up (key, route) and those reserved for an attempt.
fn decode_pass(
    given_up: &[tokio_postgres::Row],
    reserved: &[tokio_postgres::Row],
) -> Result<Found, StoreError> {
    let mut found = Found::default();
    for row in given_up {
        found
            .given_up
            .push((record_id(row.get(0))?, row.get::<_, String>(1)));
    }
    for row in reserved {
        found.reserved.push(Abandoned {
            scope: Scope::from_bytes(row.get(0)).ok_or(StoreError::Corrupt("scope"))?,
            id: record_id(row.get(1))?,
            route: row.get(2),
            fingerprint: Fingerprint::from_bytes(row.get(3))
                .ok_or(StoreError::Corrupt("fingerprint"))?,
            request: Bytes::from(row.get::<_, Vec<u8>>(4)),
            attempt: row.get(5),
        });
    }
    Ok(found)
}
