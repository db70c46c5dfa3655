//! The stores behind the claim path: Redis ([`redis::RedisStore`]) holds leases and
//! completed responses with TTLs; Postgres ([`postgres::PgStore`]) is the durable tier;
//! [`tiers::Stores`] combines them (write-through, cold-Redis lookups, the Redis
//! circuit breaker). Every store failure is a [`StoreError`], classified by source.

pub mod breaker;
pub mod memory;
pub mod postgres;
pub mod redis;
pub mod tiers;
pub mod waiters;
pub mod warmth;

pub use self::postgres::PgStore;
pub use self::redis::RedisStore;
pub use self::tiers::Stores;

/// Why a store call failed. A timed-out call has an unknown outcome: the caller must
/// assume the command may have run.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis is connected but did not answer in time (slow, paused, overloaded).
    #[error("redis did not answer within the command timeout; the outcome is unknown")]
    Timeout,
    #[error("redis is unavailable: {0}")]
    Unavailable(#[source] fred::error::Error),
    #[error("unexpected reply from the {script} script: {detail}")]
    Protocol {
        script: &'static str,
        detail: String,
    },
    #[error("a stored response is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("redis is unavailable (its circuit breaker is open)")]
    RedisDown,
    #[error("postgres did not answer within the statement timeout")]
    PgTimeout,
    #[error("postgres error: {0}")]
    Pg(#[from] tokio_postgres::Error),
    #[error("postgres is unavailable: {0}")]
    PgPool(String),
    #[error(
        "the database schema (version {database}) is newer than this binary understands \
             (version {binary}); upgrade idemgate"
    )]
    SchemaTooNew { database: i32, binary: i32 },
    #[error(
        "the database schema (version {database}) is older than this binary needs \
             (version {binary}); run `idemgate migrate`"
    )]
    SchemaTooOld { database: i32, binary: i32 },
    #[error("the write-through retry queue is full; a record was dropped")]
    QueueFull,
}

impl StoreError {
    /// Whether the failure came from Redis (and so should trip the Redis breaker).
    pub fn is_redis(&self) -> bool {
        matches!(
            self,
            StoreError::Timeout | StoreError::Unavailable(_) | StoreError::RedisDown
        )
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::Pg(e),
            deadpool_postgres::PoolError::Timeout(_) => StoreError::PgTimeout,
            other => StoreError::PgPool(other.to_string()),
        }
    }
}

impl From<fred::error::Error> for StoreError {
    fn from(e: fred::error::Error) -> Self {
        match e.kind() {
            fred::error::ErrorKind::Timeout => StoreError::Timeout,
            _ => StoreError::Unavailable(e),
        }
    }
}
