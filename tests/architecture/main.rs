//! The architecture rules of `ARCHITECTURE.md`, checked on the source with no server:
//! every module of `src/` uses only the modules its line of "Dependencies" allows and no
//! two files import each other ([`dependencies`]), and files and functions keep their
//! size rules, the tests' too ([`sizes`]).

mod dependencies;
mod sizes;
mod source;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
