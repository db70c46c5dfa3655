//! The load driver: keyed JSON POSTs from several tenants (`Authorization` values),
//! concurrent duplicates of one key, keys shared by two tenants, and client retries on
//! timeouts, connection errors, 5xx and 409, for a bounded time and request count.
//! Every exchange is recorded: status, headers (minus `Date` and `X-Request-Id`;
//! `Idempotent-Replayed` kept apart), body. Here the requests and the plan of keys; the
//! workload in `workload.rs`, its HTTP client in `client.rs`, the records in `records.rs`.

mod client;
mod records;
mod workload;

use std::sync::Arc;

pub use client::*;
pub use records::*;
pub use workload::*;

/// One logical request: what a client sends, identically, on every attempt.
#[derive(Debug)]
pub struct Req {
    pub tenant: usize,
    pub key: String,
    /// Path and query (`/v1/payments?latency_ms=200`).
    pub path: String,
    pub body: String,
}

impl Req {
    pub fn authorization(&self) -> String {
        format!("Bearer tenant-{}", self.tenant)
    }
}

/// What the driver expects the upstream to do with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyClass {
    /// Executes (once per tenant using the key).
    Normal,
    /// Never executes (`?status=503`: the upstream refuses without acting).
    NeverExecutes,
    /// Once per tenant, plus once more: its holder was frozen past its lease and
    /// another replica took the key over (by design; the fencing token is for this).
    Takeover,
    /// Once per tenant, but slower than the route's `upstream_timeout`: every attempt
    /// that reaches the upstream gets 504 before it answers, so a client learns the
    /// answer only from a replay, and that replay is its acknowledgment.
    Late,
}

/// A key and the requests that used it (one per tenant).
#[derive(Debug, Clone)]
pub struct Plan {
    pub key: String,
    pub class: KeyClass,
    pub reqs: Vec<Arc<Req>>,
}
