//! What a claim asks for ([`ClaimAsk`], with the request it keeps for the completer:
//! [`ResendableRow`]), and the claim statement's parameters built from a round of asks
//! ([`ClaimColumns`]: one array per column, in key order, so that one `INSERT ... SELECT`
//! of the unnested arrays claims every key of the round; the statement is `leases::CLAIM`).

use std::time::Duration;

use super::RecordRef;
use crate::idempotency::{Fingerprint, RecordId, Scope};

/// One claim: `token` asks for `id` under `scope` for `lease`.
#[derive(Debug, Clone)]
pub struct ClaimAsk {
    pub scope: Scope,
    pub id: RecordId,
    pub route: String,
    pub fingerprint: Fingerprint,
    pub token: String,
    pub lease: Duration,
    /// How long the completed record lives: the row's expiry is written by the claim
    /// (lease + `ttl`), so that the completion leaves it alone. Zero: the lease only.
    pub ttl: Duration,
    /// The request kept with the lease for the completer, if any.
    pub resend: Option<ResendableRow>,
}

/// A request kept with a durable lease ([`crate::idempotency::resendable`]).
#[derive(Debug, Clone)]
pub struct ResendableRow {
    /// As stored: sealed under `[encryption]`.
    pub request: bytes::Bytes,
    /// Least time the row lives with it (the record's `ttl`).
    pub lives: Duration,
    /// The completer takes the lease over (the row says so, and its attempts count on).
    pub by_completer: bool,
}

impl ClaimAsk {
    pub fn new(
        rec: RecordRef<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
    ) -> Self {
        Self {
            scope: rec.scope,
            id: rec.id,
            route: rec.route.to_string(),
            fingerprint: *fingerprint,
            token: token.to_string(),
            lease,
            ttl: Duration::ZERO,
            resend: None,
        }
    }

    /// The same ask for a record that lives `ttl` once completed.
    pub fn living(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The same ask, keeping `resend` with the lease.
    pub fn resending(mut self, resend: Option<ResendableRow>) -> Self {
        self.resend = resend;
        self
    }

    pub fn rec(&self) -> RecordRef<'_> {
        RecordRef {
            scope: self.scope,
            id: self.id,
            route: &self.route,
        }
    }
}

/// The parameters of [`CLAIM`](super::leases::CLAIM): one array per column, rows in the given order.
pub(super) struct ClaimColumns<'a> {
    scopes: Vec<&'a [u8]>,
    ids: Vec<&'a [u8]>,
    routes: Vec<&'a str>,
    fingerprints: Vec<&'a [u8]>,
    tokens: Vec<&'a str>,
    leases: Vec<f64>,
    requests: Vec<Option<&'a [u8]>>,
    keeps: Vec<f64>,
    completer: Vec<Option<&'static str>>,
}

impl<'a> ClaimColumns<'a> {
    pub(super) fn of(sorted: &[&'a ClaimAsk]) -> Self {
        let col = |f: fn(&ClaimAsk) -> &[u8]| sorted.iter().map(|a| f(a)).collect::<Vec<_>>();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX) as f64;
        Self {
            scopes: col(|a| &a.scope.as_bytes()[..]),
            ids: col(|a| &a.id.as_bytes()[..]),
            fingerprints: col(|a| &a.fingerprint.as_bytes()[..]),
            routes: sorted.iter().map(|a| a.route.as_str()).collect(),
            tokens: sorted.iter().map(|a| a.token.as_str()).collect(),
            leases: sorted.iter().map(|a| ms(a.lease)).collect(),
            requests: (sorted.iter())
                .map(|a| a.resend.as_ref().map(|k| &k.request[..]))
                .collect(),
            keeps: (sorted.iter())
                .map(|a| {
                    (a.resend.as_ref())
                        .map_or(0.0, |k| ms(k.lives))
                        .max(ms(a.lease + a.ttl))
                })
                .collect(),
            completer: (sorted.iter())
                .map(|a| (a.resend.as_ref()?.by_completer).then_some("running"))
                .collect(),
        }
    }

    /// `$1` to `$9`, in the statement's order.
    pub(super) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 9] {
        [
            &self.scopes,
            &self.ids,
            &self.routes,
            &self.fingerprints,
            &self.tokens,
            &self.leases,
            &self.requests,
            &self.keeps,
            &self.completer,
        ]
    }
}
