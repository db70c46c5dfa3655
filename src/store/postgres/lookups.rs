//! Lookups of records in Postgres, batched: the cold-Redis lookups of concurrent first
//! executions share one `SELECT ... FROM UNNEST(...)` per round, the way
//! [`writer`](super::writer) shares one statement among completions.
//!
//! A request queues its lookup only once it holds the Redis lease, and the statement
//! that answers it starts after it was queued, so it sees every record that was
//! committed before the lease was taken: batching changes no outcome, only how many
//! statements Postgres runs (about one per round instead of one per request).

use std::time::Duration;

use tokio::sync::oneshot;
use tokio_postgres::Row;

use super::batcher::{shared, Batch, Batcher};
use super::{Found, PgStore, RecordRef, RecordState, SEALED_STATUS};
use crate::idempotency::stored::TraceOrigin;
use crate::idempotency::{Fingerprint, RecordId, Scope, StoredRecord, StoredResponse};
use crate::store::StoreError;

/// Unexpired records for many keys; `u.i` says which key (1-based) a row answers.
///
/// The `LATERAL ... LIMIT 1` (the primary key allows one row anyway) keeps the plan a
/// nested loop over primary-key index scans. As a plain join, the generic plan that
/// Postgres caches for a prepared statement, when made while the table is still small,
/// is a hash join over a sequential scan, which then reads the whole table per lookup
/// as it grows.
///
/// A completed row is gone once its `replay_until` passed (when the row's own: later
/// than its completion; a row the previous release completed keeps `expires_at`), and
/// its remaining time never reaches past that moment: re-warming never extends it.
pub const LOOKUP: &str = "SELECT r.fingerprint, r.state, r.status, r.headers, r.body,
        (EXTRACT(EPOCH FROM (least(r.expires_at, CASE WHEN r.replay_until > r.completed_at
            THEN r.replay_until END) - now())) * 1000)::bigint,
        (EXTRACT(EPOCH FROM (r.lease_expires_at - now())) * 1000)::bigint,
        u.i, r.origin
     FROM UNNEST($1::bytea[], $2::bytea[]) WITH ORDINALITY AS u(scope, key_hash, i)
     CROSS JOIN LATERAL (
        SELECT * FROM idemgate_records r
        WHERE r.scope = u.scope AND r.key_hash = u.key_hash AND r.expires_at > now()
          AND NOT coalesce(r.state = 'completed' AND r.replay_until > r.completed_at
                           AND r.replay_until <= now(), false)
        LIMIT 1) r";

/// One key's answer: its record, none, or why it could not be read.
pub type Lookup = Result<Option<Found>, StoreError>;

impl PgStore {
    /// The unexpired record for `rec`, if any; an expired lease counts as none.
    pub async fn lookup(&self, rec: RecordRef<'_>) -> Result<Option<Found>, StoreError> {
        let mut found = self.lookup_many(&[(rec.scope, rec.id)]).await?;
        found.pop().unwrap_or(Ok(None))
    }

    /// The unexpired record of each key, in the order given, in one statement. A record
    /// that cannot be decoded fails its own key only.
    pub async fn lookup_many(&self, keys: &[(Scope, RecordId)]) -> Result<Vec<Lookup>, StoreError> {
        let scopes: Vec<&[u8]> = keys.iter().map(|(s, _)| &s.as_bytes()[..]).collect();
        let ids: Vec<&[u8]> = keys.iter().map(|(_, id)| &id.as_bytes()[..]).collect();
        let rows = self
            .timed("lookup", |client| async move {
                let stmt = client.prepare_cached(LOOKUP).await?;
                Ok(client.query(&stmt, &[&scopes, &ids]).await?)
            })
            .await?;
        let mut out: Vec<Lookup> = keys.iter().map(|_| Ok(None)).collect();
        for row in rows {
            let i: i64 = row.get(7);
            let slot = usize::try_from(i - 1).ok().and_then(|i| out.get_mut(i));
            if let Some(slot) = slot {
                *slot = decode_found(&row);
            }
        }
        Ok(out)
    }
}

struct Job {
    key: (Scope, RecordId),
    done: oneshot::Sender<Lookup>,
}

/// Handle to the lookup task. Cheap to clone.
#[derive(Clone)]
pub struct Lookups {
    batcher: Batcher<Job>,
}

impl Lookups {
    /// Spawns the task that runs up to `batch_max` queued lookups per statement.
    pub fn spawn(pg: PgStore, batch_max: usize) -> Self {
        let keys = Vec::with_capacity(batch_max.max(1));
        Self {
            batcher: Batcher::spawn(Rounds { pg, keys }, batch_max),
        }
    }

    /// Looks `rec` up, sharing a statement with whatever else is queued.
    pub async fn lookup(&self, rec: RecordRef<'_>) -> Lookup {
        let ended = || StoreError::TaskEnded("lookup");
        let (done, answer) = oneshot::channel();
        let job = Job {
            key: (rec.scope, rec.id),
            done,
        };
        self.batcher.send(job).await.map_err(|_| ended())?;
        answer.await.unwrap_or_else(|_| Err(ended()))
    }

    /// Statements run so far (each answers one or more lookups).
    pub fn statements(&self) -> u64 {
        self.batcher.statements()
    }
}

/// The lookup rounds: one [`PgStore::lookup_many`] per round.
struct Rounds {
    pg: PgStore,
    /// The round's keys (kept to reuse its allocation).
    keys: Vec<(Scope, RecordId)>,
}

impl Batch for Rounds {
    type Job = Job;

    /// Everything queued, up to `max` lookups (a key may be looked up twice in a round).
    fn pick(&mut self, mut queued: Vec<Job>, max: usize) -> (Vec<Job>, Vec<Job>) {
        let rest = queued.split_off(queued.len().min(max));
        (queued, rest)
    }

    /// Answers each lookup of the round; a failed statement fails them all.
    async fn run(&mut self, round: Vec<Job>) -> Vec<Job> {
        let keys = &mut self.keys;
        keys.clear();
        keys.extend(round.iter().map(|job| job.key));
        match self.pg.lookup_many(keys).await {
            Ok(found) => {
                for (job, found) in round.into_iter().zip(found) {
                    let _ = job.done.send(found);
                }
            }
            Err(e) => {
                // Every request of the round gets the failure (the caller logs it).
                for (job, e) in round.into_iter().zip(shared(e, keys.len())) {
                    let _ = job.done.send(Err(e));
                }
            }
        }
        Vec::new()
    }
}

/// Decodes a row of [`LOOKUP`]; an expired lease is `None`. The one place rows become
/// [`Found`].
pub(super) fn decode_found(row: &Row) -> Result<Option<Found>, StoreError> {
    let fingerprint: &[u8] = row.get(0);
    let fingerprint =
        Fingerprint::from_bytes(fingerprint).ok_or(StoreError::Corrupt("fingerprint"))?;
    let state = RecordState::parse(row.get(1))?;
    let remaining = |ms: Option<i64>| Duration::from_millis(ms.unwrap_or(0).max(0) as u64);
    match state {
        RecordState::Completed => {
            let status: i16 = row.get(2);
            let headers: Vec<u8> = row.get(3);
            let body: Vec<u8> = row.get(4);
            let response = if status == SEALED_STATUS {
                StoredRecord::sealed(body.into())
            } else {
                StoredResponse::from_stored_parts(status as u16, headers.into(), body.into()).map(
                    |mut plain| {
                        let origin: Option<&[u8]> = row.get(8);
                        plain.origin = origin.and_then(TraceOrigin::from_bytes);
                        StoredRecord::Plain(plain)
                    },
                )
            };
            let response = response.map_err(StoreError::Corrupt)?;
            Ok(Some(Found::Completed {
                fingerprint,
                response,
                remaining: remaining(row.get(5)),
            }))
        }
        RecordState::Leased => {
            let lease: Option<i64> = row.get(6);
            if lease.unwrap_or(0) <= 0 {
                return Ok(None);
            }
            Ok(Some(Found::Leased {
                fingerprint,
                remaining: remaining(lease),
            }))
        }
    }
}
