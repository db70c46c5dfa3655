//! idemgate: a Redis-backed idempotency gateway for HTTP APIs.
//!
//! Clients send `Idempotency-Key` on unsafe requests; the first request with a key
//! claims it atomically in Redis and is forwarded upstream, its response is stored,
//! and every retry with the same key (and the same request) gets that stored response
//! back, byte for byte, instead of a second side effect.
//!
//! # Layout
//! - [`config`]: the configuration schema, layered loading and validation.
//! - [`route`]: the route table, each route's resolved idempotency policy, and the
//!   canonical request path.
//! - [`idempotency`]: the vocabulary, independent of any store: keys, tenant scopes
//!   and the scope secret, record ids and fingerprints, claim outcomes, stored
//!   responses and replay.
//! - [`store`]: Redis (one function per Lua script in `lua/`), Postgres (claims,
//!   lookups, write-through, reaper), the lease guard, and both tiers together
//!   (`store::tiers`: claim, settle, records, maintenance).
//! - [`proxy`]: the upstream client, hop-by-hop, gateway-owned and forwarding headers.
//! - [`http`]: routers, the gateway handler, admin endpoints, problem+json errors.
//! - [`completer`]: drives requests abandoned partway (a replica died, the client
//!   never retried) to completion, on routes that keep their requests.
//! - [`app`] and [`server`]: the shared application state, listeners, shutdown.
//! - [`metrics`]: Prometheus metric names and recording.
//! - [`telemetry`]: log set-up.
//! - [`tls`]: the TLS client configurations of Redis, Postgres and HTTPS upstreams.
//!
//! `ARCHITECTURE.md` has the module map, the path of a keyed request, and the rules
//! for errors and logs.
#![forbid(unsafe_code)]

pub mod commands;
pub mod config;
pub mod idempotency;
#[doc(hidden)]
pub mod testing;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub(crate) mod app;
pub(crate) mod budget;
pub(crate) mod completer;
pub(crate) mod flow;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod problem;
pub(crate) mod proxy;
pub(crate) mod route;
pub(crate) mod server;
pub(crate) mod store;
pub(crate) mod telemetry;
pub(crate) mod tls;

pub use app::App;
pub use config::Config;
pub use server::Server;
