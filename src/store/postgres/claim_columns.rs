//! The claim statement's parameters ([`super::leases::CLAIM`]): one array per column,
//! built from a round's asks in key order, so that one `INSERT ... SELECT FROM UNNEST`
//! claims every key of the round.

use std::time::Duration;

use super::leases::ClaimAsk;

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
