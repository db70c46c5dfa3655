//! The other subcommands: `migrate`, `reap` and `explain`, `health` (exit 0 only when
//! `/readyz` is 200), the schema versions `serve` accepts, and `--version`.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::process::{config_file, BIN};
use crate::support::{eventually, MockUpstream, RedisServer};

use super::*;

#[tokio::test]
async fn migrate_reap_and_explain_commands_work_and_a_newer_schema_stops_serve() {
    let pg = crate::support::PgServer::start();
    let file = config_file(&format!("[postgres]\nurl = \"{}\"\n{ROUTE}", pg.url()));
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(&args[..1])
            .arg("--config")
            .arg(file.path())
            .args(&args[1..])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap(), text)
    };
    for _ in 0..2 {
        let (code, text) = run(&["migrate"]);
        assert_eq!(code, 0, "{text}");
        let latest = idemgate::testing::store::postgres::migrate::latest();
        assert!(
            text.contains(&format!("schema at version {latest}")),
            "{text}"
        );
    }
    let (code, text) = run(&["reap"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("deleted 0"), "{text}");

    // `explain` runs the gateway's own statements for real (4 keys claimed, completed by
    // the write-through, looked up; 4 more inserted as completions of claims Redis held
    // alone), then rolls them back.
    let (code, text) = run(&["explain", "--keys", "4"]);
    assert_eq!(code, 0, "{text}");
    let section = |name: &str| {
        let start = text
            .find(&format!("--- {name} (4 fresh keys)"))
            .unwrap_or_else(|| panic!("no {name} plan in {text}"));
        let rest = &text[start + 4..];
        rest[..rest.find("--- ").unwrap_or(rest.len())].to_string()
    };
    let claim = section("claim");
    assert!(
        claim.contains("Conflict Arbiter Indexes: idemgate_records_pkey"),
        "{claim}"
    );
    assert!(claim.contains("Tuples Inserted: 4"), "{claim}");
    assert!(claim.contains("WAL: records="), "{claim}");
    let completion = section("write-through");
    assert!(completion.contains("Conflicting Tuples: 4"), "{completion}");
    assert!(completion.contains("Tuples Inserted: 0"), "{completion}");
    // Each conflicting row passed the statement's condition (a claim of its own token).
    assert!(
        !completion.contains("Rows Removed by Conflict Filter"),
        "{completion}"
    );
    let lookup = section("lookup");
    // One row found per key, each by its primary-key index scan.
    assert!(
        lookup.contains("Index Scan using idemgate_records_pkey"),
        "{lookup}"
    );
    assert!(lookup.contains("rows=1 loops=4"), "{lookup}");
    // The completions of claims Redis held alone: inserted, no conflict arbitration.
    let insert = section("insert-new");
    assert!(insert.contains("Insert on idemgate_records"), "{insert}");
    assert!(!insert.contains("Conflict"), "{insert}");
    assert_eq!(pg.count("true").await, 0, "explain left rows behind");
    let (code, text) = run(&["explain", "--keys", "0"]);
    assert_eq!(code, 2, "{text}");

    pg.client()
        .await
        .execute(
            "INSERT INTO idemgate_schema (version, name) VALUES (999, 'future')",
            &[],
        )
        .await
        .unwrap();
    let (code, text) = run(&["serve"]);
    assert_ne!(code, 0);
    assert!(text.contains("newer than this binary"), "{text}");
}

#[tokio::test]
async fn health_exits_0_when_ready_and_1_when_not_ready_or_unreachable() {
    let mut redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(
        &redis,
        &upstream,
        "[idempotency]\non_redis_unavailable = \"reject\"\n",
        Stdio::null(),
    )
    .await;
    let mut child = KillOnDrop(served.child);
    let (code, text) = health(&served._file);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("ready: {"), "{text}");

    // Redis gone and the policy is to reject: /readyz says 503, health says 1.
    redis.stop();
    let mut text = String::new();
    let unhealthy = eventually(Duration::from_secs(15), async || {
        let code;
        (code, text) = health(&served._file);
        code == 1
    })
    .await;
    assert!(unhealthy, "still healthy without Redis: {text}");
    assert!(text.contains("not ready (503"), "{text}");
    assert!(text.contains("\"redis\""), "{text}");

    // Nobody listening on the admin port: 1, and the reason names the address.
    let _ = child.0.kill();
    let _ = child.0.wait();
    let (code, text) = health(&served._file);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", served.admin)),
        "{text}"
    );
}

#[test]
fn health_with_a_bad_config_exits_1_not_2() {
    // Container runtimes reserve exit code 2 for HEALTHCHECK.
    let (code, text) = health(&config_file("[server]\nadmin_listen = \"nowhere\"\n"));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("server.admin_listen"), "{text}");
}

/// A database migrated by a later release with only `.additive.sql` migrations still
/// runs this binary (the previous release keeps restarting during a rolling upgrade);
/// any other newer migration stops it.
#[tokio::test]
async fn a_newer_additive_schema_is_accepted_and_any_other_newer_one_refused() {
    let pg = crate::support::PgServer::start();
    let file = config_file(&format!("[postgres]\nurl = \"{}\"\n{ROUTE}", pg.url()));
    let migrate = || {
        let out = Command::new(BIN)
            .args(["migrate", "--config"])
            .arg(file.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap(), text)
    };
    assert_eq!(migrate().0, 0);
    let client = pg.client().await;
    let add = |version: i32, name: &'static str| {
        let client = &client;
        async move {
            (client.execute(
                "INSERT INTO idemgate_schema (version, name) VALUES ($1, $2)",
                &[&version, &name],
            ))
            .await
            .unwrap();
        }
    };
    let latest = idemgate::testing::store::postgres::migrate::latest();
    add(latest + 1, "9998_next.additive.sql").await;
    let (code, text) = migrate();
    assert_eq!(code, 0, "an additive newer schema refused: {text}");
    add(latest + 2, "9999_breaking.sql").await;
    let (code, text) = migrate();
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("newer than this binary"), "{text}");
}

/// `idemgate --version`: the version and every stored format's version.
#[test]
fn version_names_the_stored_formats() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(
        text.starts_with(&format!("idemgate {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    for format in [
        "redis record",
        "response encoding",
        "sealed envelope",
        "postgres schema",
    ] {
        assert!(text.contains(format), "{format} missing: {text}");
    }
}
