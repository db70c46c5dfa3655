//! The reaper's statement: deleting expired records in batches, one replica at a time
//! (an advisory lock held for each batch's transaction).

use std::time::Instant;

use deadpool_postgres::Object;

use super::PgStore;
use crate::metrics;
use crate::store::StoreError;

/// Advisory lock key of the reaper ("idemreap" in ASCII).
const REAP_LOCK: i64 = 0x6964_656d_7265_6170;

impl PgStore {
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
        let mut client = self.checkout(deadline).await?;
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
            Ok(result) => self.answered(result),
            Err(_) => {
                // The rollback is queued on the session, which is closed rather than
                // pooled: its transaction, and the lock, end as soon as Postgres gets that
                // far (the statement timeout bounds how long that can take).
                self.no_answer(Object::metrics(&client).created);
                drop(Object::take(client));
                Err(StoreError::PgTimeout)
            }
        }
    }
}
