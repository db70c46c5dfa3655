//! idemgate's developer tasks, run with `cargo xtask` (the alias in `.cargo/config.toml`),
//! kept out of the gateway's library and binary: [`reference`] generates the
//! configuration reference, `docs/configuration.md`, and [`module_map`] the map of the
//! code file by file, `docs/modules.md` (`make docs` writes both).
#![forbid(unsafe_code)]

pub mod module_map;
pub mod reference;
