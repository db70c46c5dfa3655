//! What the `idemgate` command's subcommands run besides [`App`](crate::App) and
//! [`Server`](crate::Server): log set-up, the thread-per-core workers of `serve`, the
//! migrations of `migrate`, the Postgres store of `reap`, the readiness probe of
//! `health`, and the stored formats `--version` prints.

pub use crate::http::ready_probe::{self, Readiness};
pub use crate::server::workers::Workers as ThreadPerCore;
pub use crate::store::formats::summary as stored_formats;
pub use crate::store::postgres::migrate;
pub use crate::store::{PgStore, StoreError};
pub use crate::telemetry::init as init_logging;
