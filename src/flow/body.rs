//! The bounded body read of the identify phase: the whole body within
//! `server.body_read_timeout` and `server.max_request_body`, charged to
//! `server.buffer_budget`, or why not ([`BodyError`]).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::budget::{ByteBudget, Metered, OverBudget};
use crate::config::ServerConfig;

/// Why a request body was not read; nothing was claimed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Declared or actual length above `server.max_request_body` (this many bytes).
    #[error("the request body exceeds the limit of {0} bytes")]
    TooLarge(u64),
    /// `server.buffer_budget` cannot hold the body now.
    #[error("the body buffers of this replica are full")]
    Overloaded,
    /// Not all of it arrived within `server.body_read_timeout` (this long).
    #[error("the request body did not arrive within {0:?}")]
    Timeout(Duration),
    /// Reading it failed.
    #[error("reading the request body failed: {0}")]
    Unreadable(#[source] axum::BoxError),
}

/// Reads the whole body within `server.body_read_timeout`, refusing more than
/// `server.max_request_body` bytes (declared or actual). What a refused body still
/// brings is read and discarded after the answer ([`crate::server::layers::linger`]).
///
/// The body is charged to `server.buffer_budget` (when the server set one: the
/// connection's share of it) as its bytes arrive, before anything is claimed, not on
/// its declared length (a client that declares a large body and sends nothing holds
/// no budget); one that does not fit, or any request once the budget is spent, gets
/// 503 `overloaded`.
/// The charge travels inside the returned bytes ([`crate::server::layers::budget`]).
pub async fn read_bounded(
    server: &ServerConfig,
    parts: &Parts,
    body: Body,
) -> Result<Bytes, BodyError> {
    let limit = server.max_request_body.as_u64();
    let declared = (parts.headers.get(CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(BodyError::TooLarge(limit));
    }
    let charge = match parts.extensions.get::<Arc<ByteBudget>>() {
        Some(budget) => Some(budget.try_take(0).ok_or(BodyError::Overloaded)?),
        None => None,
    };
    let mut body = Metered::new(body, charge);
    let deadline = server.body_read_timeout;
    let read = Limited::new(&mut body, limit as usize).collect();
    match tokio::time::timeout(deadline, read).await {
        Err(_) => Err(BodyError::Timeout(deadline)),
        Ok(Ok(collected)) => Ok(body.seal(collected.to_bytes())),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(BodyError::TooLarge(limit))
        }
        Ok(Err(e)) if e.downcast_ref::<OverBudget>().is_some() => Err(BodyError::Overloaded),
        Ok(Err(e)) => Err(BodyError::Unreadable(e)),
    }
}
