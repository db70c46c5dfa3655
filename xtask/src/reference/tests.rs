//! The committed reference against the schema, and the checks that keep it complete.

use super::write::{markdown, slug};
use super::*;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");

/// `docs/configuration.md` is what `cargo xtask config-reference` writes today.
#[test]
fn committed_reference_matches_the_schema() {
    let fresh = render().unwrap_or_else(|e| panic!("the reference cannot be generated: {e}"));
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == fresh,
        "docs/configuration.md is out of date with src/config/: run `make docs` \
         (cargo xtask config-reference --out docs/configuration.md) and commit it"
    );
}

/// The index in [`FILES`] of the one file that contains `text`.
fn file_with(text: &str) -> usize {
    let found: Vec<usize> = (0..FILES.len())
        .filter(|&i| FILES[i].contains(text))
        .collect();
    assert_eq!(found.len(), 1, "{text:?} is in FILES {found:?}");
    found[0]
}

/// A setting whose doc comment is removed makes the reference fail, naming it.
#[test]
fn a_setting_without_a_description_is_an_error() {
    let doc = "    /// Address for proxied traffic.\n";
    let at = file_with(doc);
    let stripped = FILES[at].replace(doc, "");
    let mut files = FILES.to_vec();
    files[at] = &stripped;
    match render_from(&files) {
        Err(ReferenceError::Undocumented(keys)) => assert_eq!(keys, ["server.listen"]),
        other => panic!(
            "expected the undocumented setting, got {:?}",
            other.map(|_| ())
        ),
    }
    // A declared idempotency setting too (the macro's list).
    let doc =
        "        /// Most duplicates waiting on one key across the fleet; more get 409 at once.\n\
        \x20       /// A duplicate joining a live answer (`streaming`) keeps its place until its\n\
        \x20       /// answer ends.\n";
    let at = file_with(doc);
    let stripped = FILES[at].replace(doc, "");
    let mut files = FILES.to_vec();
    files[at] = &stripped;
    match render_from(&files) {
        Err(ReferenceError::Undocumented(keys)) => assert_eq!(keys, ["idempotency.max_waiters"]),
        other => panic!(
            "expected the undocumented setting, got {:?}",
            other.map(|_| ())
        ),
    }
}

/// A field the source reader missed (or the schema gained) is a drift, not a gap.
#[test]
fn a_setting_the_reader_misses_is_an_error() {
    let field = "    pub linger_bytes: ByteSize,\n";
    let at = file_with(field);
    let broken = FILES[at].replace(field, "    pub linger_bytes: ByteSize, // no longer read\n");
    let mut files = FILES.to_vec();
    files[at] = &broken;
    match render_from(&files) {
        Err(ReferenceError::Drift { table, .. }) => assert_eq!(table, "server"),
        other => panic!("expected a drift, got {:?}", other.map(|_| ())),
    }
}

/// Every key a rule of check-config names literally has an example in the reference.
#[test]
fn every_rule_of_check_config_has_an_example() {
    let rules = [
        include_str!("../../../src/config/validate.rs"),
        include_str!("../../../src/config/server.rs"),
        include_str!("../../../src/config/redis.rs"),
        include_str!("../../../src/config/postgres.rs"),
        include_str!("../../../src/config/idempotency.rs"),
        include_str!("../../../src/config/routes.rs"),
        include_str!("../../../src/config/topology.rs"),
        include_str!("../../../src/config/replication.rs"),
        include_str!("../../../src/config/tls.rs"),
    ];
    let mut missing = Vec::new();
    for text in rules {
        let text = text.split("#[cfg(test)]").next().unwrap();
        for call in ["invalid(", "positive_duration(", "positive_size("] {
            for (at, _) in text.match_indices(call) {
                let rest = text[at + call.len()..].trim_start();
                let Some(key) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) else {
                    continue;
                };
                if !examples::EXAMPLES.iter().any(|(k, _)| *k == key) {
                    missing.push(key.to_string());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "add these to xtask/src/reference/examples.rs: {missing:?}"
    );
}

#[test]
fn doc_links_become_text() {
    assert_eq!(
        markdown("see [`Runtime`] and [`validate`](validate::validate)."),
        "see `Runtime` and `validate`."
    );
    assert_eq!(
        markdown("[a](README.md#x) [`b`](https://x)"),
        "[a](README.md#x) [`b`](https://x)"
    );
    assert_eq!(slug("`[redis.sentinel]`"), "redissentinel");
    assert_eq!(slug("`routes[].name`"), "routesname");
}
