//! idemgate: a Redis-backed idempotency gateway for HTTP APIs.
//!
//! Clients send `Idempotency-Key` on unsafe requests; the first request with a key
//! claims it atomically in Redis and is forwarded upstream, its response is stored,
//! and every retry with the same key (and the same request) gets that stored response
//! back, byte for byte, instead of a second side effect.
//!
//! # Layout
//! - [`config`]: the configuration schema, layered loading and validation.
//! - [`route`]: the route table and each route's resolved idempotency policy.
//! - [`idempotency`]: keys, fingerprints and scopes, claim outcomes and the lease
//!   guard, stored responses and replay.
//! - [`store`]: Redis and its Lua scripts (`lua/`).
//! - [`proxy`]: the upstream client and hop-by-hop header rules.
//! - [`http`]: routers, the gateway handler, admin endpoints, problem+json errors.
//! - [`app`] and [`server`]: the shared application state, listeners, shutdown.
//! - [`metrics`]: Prometheus metric names and recording.
//! - [`telemetry`]: log set-up.
#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod http;
pub mod idempotency;
pub mod metrics;
pub mod proxy;
pub mod route;
pub mod server;
pub mod store;
pub mod telemetry;

pub use app::App;
pub use config::Config;
pub use server::Server;
