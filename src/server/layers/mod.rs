//! The proxy and admin listeners' middleware, one folder each, in the order a
//! connection and then a request meet them:
//!
//! - [`write_timeout`]: `server.write_timeout`, on the connection's socket (both
//!   listeners).
//! - [`linger`]: lingering close of request bodies answered early (both listeners).
//! - [`in_flight`]: `server.max_concurrent_requests` (proxy listener).
//! - [`open`]: each request open on its connection until answered, for
//!   `server.idle_timeout` (admin listener; the proxy listener's [`in_flight`] does it).
//! - [`budget`]: `server.buffer_budget`, for request bodies and buffered responses
//!   (proxy listener).
//!
//! They are composed in [`super::connection`]; `server.max_connections` is the accept
//! loop's ([`super::proxy_limits`]).

pub mod budget;
pub mod in_flight;
pub mod linger;
pub mod open;
pub mod write_timeout;
