//! The write-through statement: completed records, many in one statement (the
//! [`writer`](super::writer) gathers them). A record is written when its key is free,
//! expired, or leased by its own token; first writer wins, and a lost lease never
//! overwrites.

use std::collections::HashSet;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{CompletedRecord, PgStore, RecordRef};
use crate::store::StoreError;

/// The head of both statements below: the completed records, one per element of the
/// arrays, as rows.
///
/// The arrays are unnested in a select list (`SELECT unnest($1), unnest($2), ...`: a
/// `ProjectSet`, which hands each row on as it makes it), not as `FROM UNNEST($1, $2,
/// ...)`: that is a function scan, which first copies each array into a tuplestore of its
/// own (16 kB or more each, ten of them) and frees them when the statement ends. The two
/// forms give the same rows in the same order (several set-returning functions in one
/// select list run in step). With the gateway's writer, that allocation and release
/// made glibc grow and trim the backend's heap several times per statement (`brk`, page
/// faults on the regrown pages); what that cost is measured in
/// loadtest/bench/results/write-through-statement-form.md.
macro_rules! insert_completed {
    () => {
        "INSERT INTO idemgate_records AS r
                           (scope, key_hash, route, fingerprint, state, lock_token, status,
                            headers, body, created_at, completed_at, expires_at,
                            replay_until, origin)
                         SELECT s, k, rt, f, 'completed', t, st, h, b, now(), now(),
                                now() + interval '1 millisecond' * ms,
                                now() + interval '1 millisecond' * ms, o
                         FROM (SELECT unnest($1::bytea[]) AS s, unnest($2::bytea[]) AS k,
                                      unnest($3::text[]) AS rt, unnest($4::bytea[]) AS f,
                                      unnest($5::text[]) AS t, unnest($6::int2[]) AS st,
                                      unnest($7::bytea[]) AS h, unnest($8::bytea[]) AS b,
                                      unnest($9::int8[]) AS ms, unnest($10::bytea[]) AS o) AS u"
    };
}

/// Inserts the completed records (one per element of the arrays), or overwrites a row
/// that is expired or leased by the same token (or whose lease ran out); returns the
/// key of each row written. A completion by the completer's lease marks it completed.
///
/// The completion of a claim is a HOT update (migration 0004): it changes no indexed
/// column. It keeps `lease_expires_at` (read only while the row is leased) and the
/// claim's `expires_at`, which already reaches past the record's `ttl` from now (the
/// claim wrote lease + `ttl`); a later one, e.g. after a lease extended past it, wins.
/// `replay_until` (not indexed) is the record's [`Expiry`](crate::idempotency::Expiry),
/// sent as what is left of it (`$9`, ms) so that Postgres' clock counts it down as
/// Redis' does: lookups and claims treat the row as gone from then on (migration 0005);
/// a record whose expiry passed before it was written (a copy with nothing left)
/// expires now. `origin` (`$10`, migration 0009) is the trace of the execution, or NULL.
pub(super) const WRITE_THROUGH: &str = concat!(
    insert_completed!(),
    "
                         ON CONFLICT (scope, key_hash) DO UPDATE SET
                           state = 'completed', lock_token = EXCLUDED.lock_token,
                           fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
                           headers = EXCLUDED.headers, body = EXCLUDED.body,
                           completed_at = now(),
                           expires_at = CASE WHEN EXCLUDED.replay_until <= now() THEN now()
                                        ELSE greatest(r.expires_at, EXCLUDED.expires_at) END,
                           replay_until = EXCLUDED.replay_until,
                           origin = EXCLUDED.origin,
                           request = NULL,
                           completer = CASE WHEN r.state = 'leased' AND r.completer = 'running'
                                 AND r.lock_token = EXCLUDED.lock_token THEN 'completed' END
                         WHERE r.expires_at <= now()
                            OR (r.state = 'completed' AND r.replay_until > r.completed_at
                                AND r.replay_until <= now())
                            OR (r.state = 'leased' AND (r.lock_token = EXCLUDED.lock_token
                                OR r.lease_expires_at <= now()))
                         RETURNING key_hash"
);

/// The completed records of claims that wrote no row (Redis held them alone), inserted
/// as they are: their keys are expected to be free, and the statement skips the upsert's
/// arbitration (a descent of the primary key per record to look for a conflict, and the
/// speculative insertion's confirmation). A key that is taken after all fails the whole
/// statement (`unique_violation`), and the batch is written by [`WRITE_THROUGH`].
pub(super) const INSERT_NEW: &str = insert_completed!();

impl PgStore {
    /// Writes completed records in one statement. A record is written when its key is
    /// free, expired, or leased by its own token; otherwise left alone (first writer
    /// wins, and a lost lease never overwrites). Returns, per record, whether it was written.
    ///
    /// A batch of records whose claims wrote no row ([`CompletedRecord::claimed_in_postgres`]
    /// false for all) is first inserted as it is ([`INSERT_NEW`]); only when a key turns
    /// out to be taken is it written again by the upsert, which decides each record.
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
        let sorted = &sorted;
        if records.iter().all(|r| !r.claimed_in_postgres) {
            let inserted = self
                .timed("write_through", |client| async move {
                    let stmt = client.prepare_cached(INSERT_NEW).await?;
                    let columns = Columns::of(sorted);
                    Ok(client.execute(&stmt, &columns.params()).await?)
                })
                .await;
            match inserted {
                Ok(_) => return Ok(vec![true; records.len()]),
                Err(StoreError::Pg(e)) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {}
                Err(e) => return Err(e),
            }
        }
        let written: HashSet<Vec<u8>> = self
            .timed("write_through", |client| async move {
                let stmt = client.prepare_cached(WRITE_THROUGH).await?;
                // What is left of each expiry is read with a session in hand and the
                // statement prepared: Postgres counts it from its own `now()`, so time
                // spent waiting for a pooled session before would be added to the
                // record's life (a re-warmed copy outliving its advertised expiry).
                let columns = Columns::of(sorted);
                let rows = client.query(&stmt, &columns.params()).await?;
                Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
            })
            .await?;
        Ok(records
            .iter()
            .map(|r| written.contains(&r.id.as_bytes()[..]))
            .collect())
    }
}

/// Deletes the completed record `token` wrote as a new row (`created_at` and
/// `completed_at` from one statement's `now()`), never a claim row it completed (the
/// claim's statement set `created_at` earlier).
const WITHDRAW_NEW: &str = "DELETE FROM idemgate_records
                            WHERE scope = $1 AND key_hash = $2 AND lock_token = $3
                              AND state = 'completed' AND created_at = completed_at
                            RETURNING key_hash";

impl PgStore {
    /// Takes back a written-through claim's completion that found its claim row gone
    /// (a forced invalidation, or a Postgres that lost it) and wrote the record as a new
    /// row, while Redis names another holder of the key: that holder is kept by Redis
    /// alone and runs the key again, so its answer is the one to store. True if the
    /// record was withdrawn; false if the completion had updated its own claim row (then
    /// Postgres held the lease, and its record stands).
    pub async fn withdraw_new(&self, rec: RecordRef<'_>, token: &str) -> Result<bool, StoreError> {
        self.timed("withdraw", |client| async move {
            let stmt = client.prepare_cached(WITHDRAW_NEW).await?;
            let (scope, id) = (&rec.scope.as_bytes()[..], &rec.id.as_bytes()[..]);
            let rows = client.query(&stmt, &[&scope, &id, &token]).await?;
            Ok(rows.len() == 1)
        })
        .await
    }
}

/// The parameters of [`WRITE_THROUGH`] and [`INSERT_NEW`]: one array per column, rows in
/// the given order.
pub(super) struct Columns<'a> {
    scopes: Vec<&'a [u8]>,
    ids: Vec<&'a [u8]>,
    routes: Vec<&'a str>,
    fingerprints: Vec<&'a [u8]>,
    tokens: Vec<&'a str>,
    statuses: Vec<i16>,
    headers: Vec<&'a [u8]>,
    bodies: Vec<&'a [u8]>,
    /// Milliseconds left of each record's expiry, read when the statement is sent.
    replay_in: Vec<i64>,
    origins: Vec<Option<&'a [u8]>>,
}

impl<'a> Columns<'a> {
    pub(super) fn of(sorted: &[&'a CompletedRecord]) -> Self {
        let col =
            |f: fn(&CompletedRecord) -> &[u8]| sorted.iter().map(|r| f(r)).collect::<Vec<&[u8]>>();
        Self {
            scopes: col(|r| &r.scope.as_bytes()[..]),
            ids: col(|r| &r.id.as_bytes()[..]),
            routes: sorted.iter().map(|r| r.route.as_str()).collect(),
            fingerprints: col(|r| &r.fingerprint.as_bytes()[..]),
            tokens: sorted.iter().map(|r| r.token.as_str()).collect(),
            statuses: sorted.iter().map(|r| r.status).collect(),
            headers: col(|r| &r.headers[..]),
            bodies: col(|r| &r.body[..]),
            replay_in: (sorted.iter())
                .map(|r| i64::try_from(r.expiry.remaining().as_millis()).unwrap_or(i64::MAX))
                .collect(),
            origins: sorted
                .iter()
                .map(|r| r.origin.as_ref().map(|o| &o[..]))
                .collect(),
        }
    }

    /// `$1` to `$10`, in the statement's order.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.scopes,
            &self.ids,
            &self.routes,
            &self.fingerprints,
            &self.tokens,
            &self.statuses,
            &self.headers,
            &self.bodies,
            &self.replay_in,
            &self.origins,
        ]
    }
}
