//! The stores behind the claim path. Today: Redis ([`redis::RedisStore`]), which holds
//! leases and completed responses with TTLs. Every store failure is a [`StoreError`].

pub mod redis;

pub use self::redis::RedisStore;

/// Why a store call failed. A timed-out call has an unknown outcome: the caller must
/// assume the command may have run.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
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
}

impl From<fred::error::Error> for StoreError {
    fn from(e: fred::error::Error) -> Self {
        match e.kind() {
            fred::error::ErrorKind::Timeout => StoreError::Timeout,
            _ => StoreError::Unavailable(e),
        }
    }
}
