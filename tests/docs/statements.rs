//! The statement files that `fleet/examples/pg_statement_ab.rs` measures stay the
//! statements their results name: `loadtest/bench/statements/project-set.sql` is the
//! gateway's insert of completed records (the head of the statements in
//! `src/store/postgres/completions.rs`), word for word, and `unnest.sql` is the form it
//! replaced, which the gateway no longer sends.

use std::path::Path;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The SQL as words: the files and the Rust string are indented differently.
fn words(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The string literal the `insert_completed!` macro expands to.
fn gateway_insert() -> String {
    let source = read("src/store/postgres/completions.rs");
    let after = (source.split_once("macro_rules! insert_completed"))
        .expect("completions.rs defines insert_completed!")
        .1;
    let literal = after.split('"').nth(1).expect("the macro's string literal");
    words(literal)
}

#[test]
fn the_measured_statement_is_the_gateways_insert_and_the_old_one_is_not() {
    let gateway = gateway_insert();
    assert!(
        gateway.starts_with("INSERT INTO idemgate_records"),
        "{gateway}"
    );
    let current = words(&read("loadtest/bench/statements/project-set.sql"));
    assert_eq!(current, gateway);
    let previous = words(&read("loadtest/bench/statements/unnest.sql"));
    assert_ne!(previous, gateway);
    assert!(previous.contains("FROM UNNEST("), "{previous}");
}
