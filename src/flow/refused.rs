//! What the gateway answers a request with itself, instead of a response from the
//! upstream or a record ([`Refused`]: the flow's one error enum; the edge renders each
//! as problem+json), and the one log line of a stored record that cannot be read.

use std::time::Duration;

use axum::response::Response;
use http::StatusCode;

use super::body::BodyError;
use crate::idempotency::{KeyError, ScopeError};
use crate::metrics::{self, Outcome};
use crate::proxy::UpstreamError;
use crate::store::StoreError;

/// A request's answer: a response (the upstream's, or one replayed), or a refusal.
pub type Reply = Result<Response, Refused>;

/// Why the gateway answers a request itself.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// No route's `path_prefix` matches the path (of this many bytes).
    #[error("no route for this {0}-byte path")]
    NoRoute(usize),
    /// The idempotency key is missing (on a route that requires one) or invalid.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The request has no usable tenant scope.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// The body was refused or could not be read; nothing was claimed.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The key was used with a different request; answered with the route's status.
    #[error("the idempotency key was used with a different request")]
    Mismatch(StatusCode),
    /// Another request holds the key; it may be free after this long.
    #[error("another request with this idempotency key is in flight")]
    InFlight(Duration),
    /// This request's lease ran out and another execution took the key over; retry
    /// after this long for that execution's outcome.
    #[error("another execution took the key over")]
    Superseded(Duration),
    /// A store call failed (or a stored record cannot be read).
    #[error(transparent)]
    Store(StoreError),
    /// The upstream call failed.
    #[error(transparent)]
    Upstream(UpstreamError),
    /// The upstream did not answer within the route's `upstream_timeout`; the call goes
    /// on under the key's lease, and a retry gets its answer once stored.
    #[error("the upstream did not answer within {0:?}; the call goes on")]
    UpstreamStillRunning(Duration),
    /// The request's task failed (a panic, logged where it was caught).
    #[error("the request failed inside the gateway")]
    TaskFailed,
}

impl Refused {
    /// How a request refused before its claim (in admit or identify) is counted: a key
    /// missing from where the route reads it, a key refused, or anything else.
    pub fn outcome(&self) -> Outcome {
        match self {
            Refused::Key(KeyError::Missing(_) | KeyError::NotInBody(_)) => Outcome::MissingKey,
            Refused::Key(_) => Outcome::InvalidKey,
            _ => Outcome::Rejected,
        }
    }
}

/// A stored record that cannot be read: counted and logged once, here (the span names
/// the record by `key_hash`). It is not replayed and not re-run.
pub fn unreadable(e: &StoreError) {
    let reason = e.unreadable().unwrap_or("corrupt");
    metrics::unreadable(reason);
    tracing::error!(error = %e, reason,
        "the stored response for this key cannot be read: answering 500 \
        stored_record_unreadable until it expires or an admin invalidates it");
}
