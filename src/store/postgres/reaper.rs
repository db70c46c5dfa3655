//! The reaper: deletes expired records, one replica at a time.

use std::time::Instant;

use super::PgStore;
use crate::metrics;
use crate::store::StoreError;

/// Advisory lock key of the reaper ("idemreap" in ASCII).
const REAP_LOCK: i64 = 0x6964_656d_7265_6170;

impl PgStore {
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
