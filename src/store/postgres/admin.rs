//! The admin API's statements on one record: what Postgres holds for it, and deleting
//! it unless a live lease holds it. Not on the request path.

use std::time::Duration;

use super::{CompleterMark, PgRecord, PgStore, RecordRef, RecordState};
use crate::store::redis::Invalidated;
use crate::store::StoreError;

impl PgStore {
    /// What Postgres holds for `rec`, expired or not (admin API; not on the request path).
    pub async fn inspect(&self, rec: RecordRef<'_>) -> Result<Option<PgRecord>, StoreError> {
        self.timed("inspect", |client| async move {
            let row = client
                .query_opt(
                    "SELECT state, nullif(status, 0::int2), coalesce(octet_length(body), 0) + coalesce(octet_length(headers), 0),
                        (EXTRACT(EPOCH FROM (least(expires_at, CASE WHEN replay_until > completed_at
                            THEN replay_until END) - now())) * 1000)::bigint,
                        CASE WHEN state = 'leased' THEN
                            (EXTRACT(EPOCH FROM (lease_expires_at - now())) * 1000)::bigint END,
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
    ) -> Result<Invalidated, StoreError> {
        Ok(self.invalidate_record(rec, force).await?.0)
    }

    /// [`Self::invalidate`], and the lock token of the completed, unexpired record it
    /// deleted, if it deleted one: the execution whose lease Redis may still keep
    /// (filled on replay).
    pub async fn invalidate_record(
        &self,
        rec: RecordRef<'_>,
        force: bool,
    ) -> Result<(Invalidated, Option<String>), StoreError> {
        self.timed("invalidate", |client| async move {
            // The sub-select sees the row as it was before the DELETE (same snapshot).
            let row = client
                .query_one(
                    "WITH gone AS (
                       DELETE FROM idemgate_records
                       WHERE scope = $1 AND key_hash = $2
                         AND ($3 OR state = 'completed' OR expires_at <= now()
                              OR coalesce(lease_expires_at <= now(), true))
                       RETURNING CASE WHEN state = 'completed' AND expires_at > now()
                                       AND NOT coalesce(replay_until > completed_at
                                                        AND replay_until <= now(), false)
                                      THEN lock_token END AS t)
                     SELECT (SELECT count(*) FROM gone),
                            (SELECT coalesce((EXTRACT(EPOCH FROM (lease_expires_at - now()))
                                              * 1000)::bigint, 0)
                             FROM idemgate_records WHERE scope = $1 AND key_hash = $2),
                            (SELECT t FROM gone LIMIT 1)",
                    &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &force],
                )
                .await?;
            let (deleted, lease_ms): (i64, Option<i64>) = (row.get(0), row.get(1));
            let invalidated = match (deleted, lease_ms) {
                (1.., _) => Invalidated::Deleted,
                (_, Some(ms)) => Invalidated::Leased {
                    remaining: Duration::from_millis(ms.max(0) as u64),
                },
                (_, None) => Invalidated::Absent,
            };
            Ok((invalidated, row.get(2)))
        })
        .await
    }
}
