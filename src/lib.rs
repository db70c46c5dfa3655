//! idemgate: a Redis-backed idempotency gateway for HTTP APIs.
//!
//! Clients send `Idempotency-Key` on unsafe requests; the first request with a key
//! claims it atomically in Redis and is forwarded upstream, its response is stored,
//! and every retry with the same key (and the same request) gets that stored response
//! back, byte for byte, instead of a second side effect.
//!
//! # Layout
//! In the order a keyed request meets them, then what surrounds them:
//! - [`server`]: listeners, the accept loop, and one folder per connection layer
//!   (`server::layers`: write timeout, lingering close, in-flight limit, byte budget).
//! - [`http`]: the HTTP edge: routers, the gateway handler (request id, canonical path,
//!   the request span, refusals rendered as problem+json, the one log line), admin.
//! - [`flow`]: the request flow as named phases: admit → identify → claim → run →
//!   settle.
//! - [`idempotency`]: the vocabulary, independent of any store: keys, tenant scopes,
//!   record ids and fingerprints, claim outcomes, stored responses and their encoding,
//!   the completer's resendable requests, encryption at rest.
//! - [`store`]: Redis (`store::redis`, one file per Lua script in `lua/`), Postgres
//!   (`store::postgres`), the lease guard and its heartbeat, and both tiers together
//!   (`store::tiers`).
//! - [`proxy`]: the upstream client and the header rules; [`route`]: the route table
//!   and canonical paths; [`problem`]: problem+json; [`grpc`]: gRPC statuses (read
//!   from upstream answers, and each problem as one); [`budget`]: the byte budget.
//! - [`completer`]: drives requests abandoned partway to completion through the flow.
//! - [`app`]: the application state, built once in named start-up steps.
//! - [`config`]: the configuration schema, loading, rules and warnings (a leaf).
//! - [`metrics`], [`telemetry`], [`tls`]: metric names, log set-up, TLS clients.
//! - [`commands`], [`testing`], `fuzzing`: what the binary, the integration tests and
//!   the fuzz targets reach.
//!
//! The public API is [`config`], [`idempotency`], [`App`], [`Config`], [`Server`] and
//! [`commands`]; every other module is `pub(crate)`. This list is a summary, one line
//! per module; `ARCHITECTURE.md` has the map file by file, the start-up sequence, where
//! to make everyday changes, the allowed dependencies (checked by
//! `tests/architecture/`), the path of a keyed request, and the rules for errors and
//! logs.
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
pub(crate) mod grpc;
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
