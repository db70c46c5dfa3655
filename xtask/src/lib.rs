//! idemgate's developer tasks, run with `cargo xtask` (the alias in `.cargo/config.toml`),
//! kept out of the gateway's library and binary: [`reference`] generates the
//! configuration reference, `docs/configuration.md` (`make docs`).
#![forbid(unsafe_code)]

pub mod reference;
