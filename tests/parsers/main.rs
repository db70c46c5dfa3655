//! Property tests of the hand-written parsers: canonical JSON and
//! the fingerprint built on it, the `Idempotency-Key` decoder, and the stored header
//! block. What the properties found is kept as plain tests (the corpus) at the end of
//! the module of the parser concerned.

mod canonical;
mod header_block;
mod json;
mod key;
mod resendable;

use proptest::test_runner::Config;

/// `n` cases per property (or `PROPTEST_CASES`, for a longer run): enough to cover the
/// generators' shapes, few enough that the binary runs in seconds in a debug build.
/// No regression files: a failure found is kept as a plain test in its module's corpus.
fn cases(n: u32) -> Config {
    let env = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok());
    Config {
        cases: env.unwrap_or(n),
        failure_persistence: None,
        ..Config::default()
    }
}
