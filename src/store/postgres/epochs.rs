//! The Redis key prefixes whose epoch markers were recorded (`idemgate_redis_epochs`,
//! by a replica with `postgres.claims = "vouched"`, read in every mode): what tells a
//! new Redis from one that lost its data, and whether Redis may hold a claim alone.

use super::PgStore;
use crate::store::StoreError;

impl PgStore {
    /// Whether the epoch markers of `prefix` were written once already.
    pub async fn epochs_written(&self, prefix: &str) -> Result<bool, StoreError> {
        self.timed("epochs", |client| async move {
            let row = client
                .query_opt(
                    "SELECT 1 FROM idemgate_redis_epochs WHERE key_prefix = $1",
                    &[&prefix],
                )
                .await?;
            Ok(row.is_some())
        })
        .await
    }

    /// Records that every epoch marker of `prefix` is written (once; again is harmless).
    pub async fn mark_epochs_written(&self, prefix: &str) -> Result<(), StoreError> {
        self.timed("epochs", |client| async move {
            client
                .execute(
                    "INSERT INTO idemgate_redis_epochs (key_prefix) VALUES ($1) \
                     ON CONFLICT DO NOTHING",
                    &[&prefix],
                )
                .await?;
            Ok(())
        })
        .await
    }
}
