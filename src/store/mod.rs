//! The stores behind the claim path: Redis ([`redis::RedisStore`]) holds leases and
//! completed responses with TTLs; Postgres ([`postgres::PgStore`]) is the durable tier;
//! [`tiers::Stores`] combines them (write-through, cold-Redis lookups, the Redis
//! circuit breaker). A held claim is a [`lease::Lease`] (the guard and its heartbeat);
//! [`memory`] is the replay cache, [`formats`] the stored formats' versions. Every
//! store failure is a [`StoreError`], classified by source.

pub mod formats;
pub mod lease;
pub mod memory;
pub mod postgres;
pub mod redis;
pub mod tiers;

pub use self::lease::Lease;
pub use self::postgres::PgStore;
pub use self::redis::RedisStore;
pub use self::tiers::Stores;

/// How often a task that takes rounds (the Postgres batches, the `WAIT` rounds of
/// vouched claims) yields before it takes one: each yield lets the tasks ready on the
/// runtime run first. Two, measured side by side in one sitting: one left Postgres'
/// rounds smaller (0.32 against 0.26 commits per write-through first execution, 0.42
/// with none), and a timer of 300 µs to 1.5 ms saved no more and cost latency and
/// throughput.
const ROUND_YIELDS: usize = 2;

/// Lets the callers woken in the same turn as a round's task (answers that came in
/// while its last round ran) queue before it takes the next round, so that they share
/// it instead of waiting for, and paying, a round of their own. No timer, no wake-up
/// of another thread: a lone caller waits for [`ROUND_YIELDS`] turns of the runtime.
pub(crate) async fn let_woken_callers_queue() {
    for _ in 0..ROUND_YIELDS {
        tokio::task::yield_now().await;
    }
}

/// Why a store call failed. A timed-out call has an unknown outcome: the caller must
/// assume the command may have run.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis is connected but did not answer in time (slow, paused, overloaded).
    #[error("redis did not answer within the command timeout; the outcome is unknown")]
    Timeout,
    /// The connection to Redis is gone or cannot be made: trips the breaker.
    #[error("redis is unavailable: {0}")]
    Unavailable(#[source] fred::error::Error),
    /// Redis is there but answered with an error (OOM, READONLY, BUSY, MISCONF...):
    /// this request gets a 503, but claims stay in Redis (no breaker trip, no fallback).
    #[error("redis refused the command: {0}")]
    Refused(#[source] fred::error::Error),
    #[error("unexpected reply from the {script} script: {detail}")]
    Protocol {
        script: &'static str,
        detail: String,
    },
    #[error("a stored response is corrupt: {0}")]
    Corrupt(&'static str),
    /// A stored response that does not open (`[encryption]`): never replayed.
    #[error("a stored response cannot be opened: {0}")]
    Unreadable(#[from] crate::idempotency::Unreadable),
    #[error("redis is unavailable (its circuit breaker is open)")]
    RedisDown,
    #[error("postgres did not answer within the statement timeout")]
    PgTimeout,
    #[error("postgres error: {}", pg_reason(.0))]
    Pg(#[from] tokio_postgres::Error),
    #[error("no postgres connection: {0}")]
    PgPool(#[source] deadpool_postgres::PoolError),
    /// The latest attempt to connect failed on every host of `postgres.url` (why, per
    /// host): a statement needing a new connection fails at once while the hosts are
    /// tried again in the background.
    #[error("no postgres host takes connections (the latest attempt failed on each: {0})")]
    PgNoHost(String),
    /// `postgres.url` or the pool settings did not make a pool.
    #[error("postgres is misconfigured: {0}")]
    PgConfig(String),
    /// One batched statement failed for every request that shared it.
    #[error("a shared postgres statement failed: {0}")]
    PgShared(#[source] std::sync::Arc<StoreError>),
    /// A background task the request was waiting on is gone (shutdown).
    #[error("the {0} task ended")]
    TaskEnded(&'static str),
    /// A claim kept meeting a row that expired between reading and taking it.
    #[error("a postgres claim raced with expiry three times")]
    ClaimRaced,
    /// The lease lives in Postgres, but no `[postgres]` is configured (a bug).
    #[error("no durable tier is configured")]
    NoDurableTier,
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
    /// A cold-Redis lookup could not tell whether Postgres holds the key: the claim
    /// fails closed (its lease released) instead of guessing "not found".
    #[error("postgres could not say whether the key is stored: {0}")]
    LookupFailed(#[source] Box<StoreError>),
    /// The task running a claim ended abnormally (a panic, or the runtime stopping).
    #[error("the claim task ended abnormally: {0}")]
    ClaimTask(#[source] tokio::task::JoinError),
}

/// A Postgres error on one line: where the server answered, its severity, SQLSTATE and
/// message (tokio-postgres says only "db error"), never its DETAIL, which can quote a
/// row; otherwise the client's error and its causes.
fn pg_reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => postgres::error_chain(e),
    }
}

/// What a store failure means for the request that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A store could not take or answer the claim now: 503, retry later.
    Unavailable,
    /// A store answered with something it should never hold: 500.
    Internal,
}

impl StoreError {
    /// The one classification of store failures for answers and metrics.
    pub fn failure(&self) -> Failure {
        match self {
            StoreError::Corrupt(_)
            | StoreError::Unreadable(_)
            | StoreError::Protocol { .. }
            | StoreError::ClaimTask(_) => Failure::Internal,
            StoreError::LookupFailed(inner) => inner.failure(),
            _ => Failure::Unavailable,
        }
    }

    /// Why a stored record could not be read (the metric label), when that is the
    /// failure: it is not replayed, and the key answers 500 until it expires or is
    /// invalidated (a record was stored for it, so it is never run again either).
    pub fn unreadable(&self) -> Option<&'static str> {
        match self {
            StoreError::Unreadable(why) => Some(why.reason()),
            StoreError::Corrupt(_) => Some("corrupt"),
            StoreError::LookupFailed(inner) => inner.unreadable(),
            _ => None,
        }
    }

    /// Whether the failure came from Redis (settling scripts retry on it).
    pub fn is_redis(&self) -> bool {
        matches!(
            self,
            StoreError::Timeout
                | StoreError::Unavailable(_)
                | StoreError::Refused(_)
                | StoreError::RedisDown
        )
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::Pg(e),
            deadpool_postgres::PoolError::Timeout(_) => StoreError::PgTimeout,
            other => StoreError::PgPool(other),
        }
    }
}

impl From<fred::error::Error> for StoreError {
    /// Classifies a fred error by source: a deadline, a lost connection, or an error
    /// reply from a Redis that is up. fred maps server replies (`-OOM`, `-READONLY`,
    /// `-BUSY`, `-MISCONF`, `-ERR`, `-NOAUTH`, `-WRONGTYPE`, `-MOVED`...) to the kinds
    /// below; everything else (IO, cancelled, routing, TLS...) is the connection.
    fn from(e: fred::error::Error) -> Self {
        use fred::error::ErrorKind;
        match e.kind() {
            ErrorKind::Timeout => StoreError::Timeout,
            ErrorKind::Unknown
            | ErrorKind::InvalidArgument
            | ErrorKind::InvalidCommand
            | ErrorKind::Auth
            | ErrorKind::Cluster
            | ErrorKind::NotFound => StoreError::Refused(e),
            _ => StoreError::Unavailable(e),
        }
    }
}
