//! The policies idempotency settings choose between (`[idempotency]` and
//! `[routes.idempotency]`): what an anonymous caller, a key in flight, a streamed
//! answer, an ambiguous outcome and an unavailable Redis get.

use serde::{Deserialize, Serialize};

/// `idempotency.on_redis_unavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRedisUnavailable {
    /// Claim in Postgres instead (needs `[postgres]`).
    Postgres,
    /// Answer 503 `store_unavailable`.
    Reject,
    /// Forward without idempotency, marked `Idempotency-Status: bypassed`.
    PassThrough,
}

/// `idempotency.anonymous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnonymousScope {
    /// 400 `idempotency_scope_missing`.
    Reject,
    /// One scope for every caller without the scope headers, on this route.
    Shared,
}

/// `idempotency.in_flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlightPolicy {
    /// 409 `idempotency_key_in_flight` with `Retry-After`.
    Reject,
    /// Wait up to `wait_timeout` for the holder, then replay (or 409).
    Wait,
}

/// `idempotency.streaming`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Streaming {
    /// Answers that stream are forwarded as they come, recorded on the way, and joinable.
    Live,
    /// Every keyed answer is buffered whole before it is sent.
    Buffer,
}

/// `idempotency.on_ambiguous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnAmbiguous {
    /// Release the key: a retry runs again (the upstream deduplicates on the forwarded key).
    Release,
    /// Store a 502/504 `upstream_outcome_unknown` problem and replay it.
    Store,
}
