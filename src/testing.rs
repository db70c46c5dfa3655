//! What the integration tests (`tests/it`, `tests/chaos`, `tests/parsers`) reach inside
//! the crate: the stores on their own (claims, batchers, scripts and slots against a
//! real Redis or Postgres, with no gateway around them), the route table, one pass of
//! the completer, and the TLS provider. Mirrors the crate's paths, so a test names
//! `idemgate::testing::store::postgres::writer::Writer` for
//! `crate::store::postgres::writer::Writer`. Not part of idemgate's API: hidden from
//! the docs, changed in any release.

/// Redis, Postgres and both together.
pub mod store {
    pub use crate::store::{postgres, redis, PgStore, RedisStore, StoreError, Stores};
}

/// The route table and canonical paths.
pub mod route {
    pub use crate::route::{path, RouteTable};
}

/// One pass of the completer: reserve abandoned leases, attempt them.
pub mod completer {
    pub use crate::completer::{attempt_all, reserve};
}

/// The crypto provider every TLS configuration of the gateway uses.
pub mod tls {
    pub use crate::tls::provider;
}
