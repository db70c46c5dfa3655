//! The stores as `/readyz` and the shutdown see them: each tier's health, the
//! write-through queue, whether claims go to Redis, and the drain at the end.

use std::time::Duration;

use super::Stores;

/// One store's answer to a readiness check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    /// It answered with an error (logged here, never shown).
    Down,
    /// No answer in time.
    Silent,
}

impl Health {
    fn of<E: std::fmt::Display>(
        name: &'static str,
        r: Result<Result<(), E>, tokio::time::error::Elapsed>,
    ) -> Self {
        match r {
            Ok(Ok(())) => Health::Up,
            Ok(Err(e)) => {
                tracing::warn!(dependency = name, error = %e, "readiness check failed");
                Health::Down
            }
            Err(_) => Health::Silent,
        }
    }
}

impl Stores {
    /// Readiness of Redis, and of Postgres with its write-through queue depth (`None`
    /// without `[postgres]`).
    pub async fn health(&self, deadline: Duration) -> (Health, Option<(Health, usize)>) {
        let redis = Health::of(
            "redis",
            tokio::time::timeout(deadline, self.0.redis.ping()).await,
        );
        let postgres = match &self.0.postgres {
            None => None,
            Some(pg) => {
                let ping = tokio::time::timeout(deadline, pg.store.ping()).await;
                Some((Health::of("postgres", ping), pg.writer.queue_depth()))
            }
        };
        (redis, postgres)
    }

    /// Completed records waiting for Postgres in the write-through retry queue.
    pub fn queue_depth(&self) -> usize {
        self.0
            .postgres
            .as_ref()
            .map_or(0, |pg| pg.writer.queue_depth())
    }

    /// Whether every claim goes to Redis (no shard's breaker is open).
    pub fn claims_in_redis(&self) -> bool {
        !self.0.breaker.any_open()
    }

    /// Whether the probe has read Redis's eviction policy as `noeviction`: until it has,
    /// no claim is warm (`lookup_on_miss`).
    pub fn redis_keeps_everything(&self) -> bool {
        self.0.warmth.keeps_everything()
    }

    /// At shutdown: drains the write-through queue within `left` (what is left of
    /// `server.shutdown_grace`), then closes the Redis connections.
    pub async fn close(&self, left: Duration) {
        if let Some(pg) = &self.0.postgres {
            pg.writer.drain(left).await;
        }
        self.0.redis.quit().await;
    }
}
