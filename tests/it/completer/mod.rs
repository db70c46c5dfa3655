//! The completer: a request abandoned partway is sent again once, and what it kept for
//! that is sealed at rest and cleared.

mod abandoned;
mod resendable;

use std::time::Duration;

use crate::support::{MockUpstream, PgServer, RedisServer};

/// The routes' `lock_ttl`.
pub const LOCK_TTL: Duration = Duration::from_secs(2);
/// The completer's `completer_interval`.
pub const INTERVAL: Duration = Duration::from_millis(500);
/// The admin token.
pub const TOKEN: &str = "test-admin-token-0123456789";

/// How claims are kept (`postgres.claims`): the completer's routes write theirs
/// through in either mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claims {
    WriteThrough,
    /// On a Redis that fsyncs every write, so that other claims are kept by Redis alone.
    Vouched,
}

impl Claims {
    fn setting(self) -> &'static str {
        match self {
            Claims::WriteThrough => "claims = \"write_through\"\n",
            Claims::Vouched => "claims = \"vouched\"\n",
        }
    }

    /// The Redis this mode runs on.
    fn redis(self) -> RedisServer {
        match self {
            Claims::WriteThrough => RedisServer::start(),
            Claims::Vouched => RedisServer::start_with(idemgate_fleet::DURABLE_REDIS),
        }
    }
}

/// `[routes.idempotency]` and `[postgres]` of every gateway here; `interval` is the
/// completer's.
pub fn extra(pg: &PgServer, completer: bool, interval: Duration) -> String {
    extra_in(Claims::WriteThrough, pg, completer, interval)
}

/// [`extra`] with claims kept as `claims` says.
pub fn extra_in(claims: Claims, pg: &PgServer, completer: bool, interval: Duration) -> String {
    format!(
        "[routes.idempotency]\ncompleter = {completer}\nlock_ttl = \"{}ms\"\n\
         [admin]\ntoken = \"{TOKEN}\"\n{}",
        LOCK_TTL.as_millis(),
        pg.section(&format!(
            "{}completer_interval = \"{}ms\"\ncompleter_grace = \"0s\"\ncompleter_attempts = 3",
            claims.setting(),
            interval.as_millis()
        )),
    )
}

/// Redis, Postgres and the mock upstream, which takes `latency` with each request.
pub async fn stores(latency: Duration) -> (RedisServer, PgServer, MockUpstream) {
    stores_in(Claims::WriteThrough, latency).await
}

/// [`stores`], Redis run as `claims` needs.
pub async fn stores_in(claims: Claims, latency: Duration) -> (RedisServer, PgServer, MockUpstream) {
    let (redis, pg, up) = (
        claims.redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    up.set_delay(latency);
    (redis, pg, up)
}
