//! The `idemgate` binary run as a process: its commands and configuration errors, SIGTERM,
//! logs and `health` (`cli.rs`), `server.runtime = "thread_per_core"`, and a rolling
//! upgrade from the previous release (`upgrade.rs`, `make upgrade-check`), going on to
//! vouched claims (`upgrade_vouched.rs`).

mod cli;
mod thread_per_core;
mod tracing;
mod upgrade;
mod upgrade_vouched;
