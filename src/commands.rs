//! What the `idemgate` command's subcommands run besides [`App`](crate::App) and
//! [`Server`](crate::Server): log set-up, the thread-per-core workers of `serve`, the
//! migrations of `migrate`, the Postgres store of `reap`, the readiness probe of
//! `health`, the stored formats `--version` prints, and `check-config`'s reading of the
//! listener's certificate.

pub use crate::http::ready_probe::{self, Readiness};
pub use crate::server::workers::Workers as ThreadPerCore;
pub use crate::store::formats::summary as stored_formats;
pub use crate::store::postgres::migrate;
pub use crate::store::{PgStore, StoreError};
pub use crate::telemetry::init as init_logging;

/// Reads the proxy listener's certificate and key (`[server.tls]`), as `serve` would:
/// what `check-config` says about them. The error names the key at fault.
pub fn check_listener_tls(config: &crate::Config) -> Result<(), impl std::fmt::Display> {
    crate::tls::listener::ListenerCert::load(&config.server.tls).map(drop)
}
