//! `check-config` and `serve` reading a configuration: errors that name the key (exit 2),
//! the effective configuration redacted, warnings, the environment, the Kubernetes
//! configuration, and renamed settings read with a warning.

use std::process::{Command, Stdio};

use crate::support::process::{config_file, BIN};
use crate::support::{MockUpstream, RedisServer};

use super::*;

#[test]
fn config_errors_name_the_key_and_exit_2() {
    let cases = [
        (
            format!("{ROUTE}[routes.idempotency]\nlock_ttl = \"2s\"\n"),
            "routes[0].idempotency.lock_ttl",
        ),
        (format!("[redis]\nurll = \"x\"\n{ROUTE}"), "urll"),
        (
            format!("[server]\nshutdown_grace = \"later\"\n{ROUTE}"),
            "server.shutdown_grace",
        ),
    ];
    for (text, key) in cases {
        let (code, _, stderr) = check(&config_file(&text), &[]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(key), "{key} not named in: {stderr}");
    }
}

#[test]
fn check_config_prints_the_effective_config_redacted() {
    let file = config_file(&format!(
        "[redis]\nurl = \"redis://app:hunter2@127.0.0.1:6379\"\n{ROUTE}"
    ));
    let (code, stdout, stderr) = check(&file, &[("IDEMGATE__IDEMPOTENCY__MAX_KEY_LENGTH", "64")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
    assert!(stdout.contains("app:***@"), "{stdout}");
    assert!(
        stdout.contains("max_key_length = 64"),
        "environment overrides the file: {stdout}"
    );
    assert!(
        stdout.contains("lock_ttl = \"30s\""),
        "defaults are shown: {stdout}"
    );
}

/// `postgres.redis_fill` left unset follows `claims`, and `check-config` shows the value
/// in force: `on_replay` with vouched claims (the default), `at_completion` with
/// write-through ones; set in the environment, it wins.
#[test]
fn check_config_shows_the_redis_fill_that_claims_give() {
    let pg = "[postgres]\nurl = \"postgres://localhost/x\"\n";
    let cases = [
        ("", vec![], "on_replay"),
        ("claims = \"write_through\"\n", vec![], "at_completion"),
        (
            "",
            vec![("IDEMGATE__POSTGRES__REDIS_FILL", "at_completion")],
            "at_completion",
        ),
    ];
    for (lines, env, fill) in cases {
        let file = config_file(&format!("{pg}{lines}{ROUTE}"));
        let (code, stdout, stderr) = check(&file, &env);
        assert_eq!(code, 0, "{stderr}");
        let shown = format!("redis_fill = \"{fill}\"");
        assert!(
            stdout.contains(&shown),
            "{lines:?} {env:?}: {shown} not in {stdout}"
        );
    }
}

/// The configuration warnings start-up logs are printed by `check-config` too, on
/// standard error; they do not fail a valid configuration (exit 0).
#[test]
fn check_config_prints_the_configuration_warnings_and_still_exits_0() {
    let file = config_file(&format!(
        "[idempotency]\non_redis_unavailable = \"postgres\"\n{ROUTE}"
    ));
    let (code, stdout, stderr) = check(&file, &[]);
    assert_eq!(code, 0, "{stderr}");
    for warning in [
        "idemgate: warning: no [postgres] configured: redis-only mode",
        "idemgate: warning: on_redis_unavailable = \"postgres\" without [postgres]: \
         keyed requests answer 503 while redis is down",
        "idemgate: warning: no idempotency.scope_secret_file",
    ] {
        assert!(stderr.contains(warning), "{warning} not in: {stderr}");
    }
    assert!(!stderr.contains("[[routes]]"), "{stderr}");
    assert!(
        stdout.contains("on_redis_unavailable = \"postgres\""),
        "{stdout}"
    );

    let (code, _, stderr) = check(&config_file(""), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("idemgate: warning: no [[routes]] configured"),
        "{stderr}"
    );
}

#[test]
fn environment_values_are_validated_too() {
    let (code, _, stderr) = check(
        &config_file(ROUTE),
        &[("IDEMGATE__IDEMPOTENCY__LOCK_TTL", "1s")],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("routes[0].idempotency.lock_ttl"),
        "{stderr}"
    );
}

#[test]
fn the_kubernetes_config_passes_check_config_with_the_secrets_from_the_environment() {
    // deploy/kubernetes/idemgate.toml, as the Deployment runs it: the store URLs and
    // the admin token come from the Secret through IDEMGATE__* variables.
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/idemgate.toml");
    let out = Command::new(BIN)
        .arg("check-config")
        .env("IDEMGATE_CONFIG", &file)
        .env(
            "IDEMGATE__REDIS__URL",
            "redis://:redis-pass@redis.example:6379",
        )
        .env(
            "IDEMGATE__POSTGRES__URL",
            "postgres://gw:pg-pass@pg.example:5432/gw",
        )
        .env("IDEMGATE__ADMIN__TOKEN", "0123456789abcdef0123")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for secret in ["redis-pass", "pg-pass", "0123456789abcdef0123"] {
        assert!(!stdout.contains(secret), "{secret} shown: {stdout}");
    }
    assert!(stdout.contains("redis.example:6379"), "{stdout}");
    assert!(stdout.contains("pg.example:5432"), "{stdout}");
    assert!(stdout.contains("listen = \"0.0.0.0:8080\""), "{stdout}");
    assert!(
        stdout.contains("admin_listen = \"0.0.0.0:9090\""),
        "{stdout}"
    );
}

/// A configuration written for 0.1.0 (`idempotency.scope_header`, before it became a
/// list): `check-config` accepts it with a warning naming the new spelling, from the
/// file and from the environment; the old and the new spelling together is exit 2
/// naming both.
#[test]
fn a_renamed_setting_is_read_with_a_deprecation_warning() {
    let old = config_file(&format!(
        "[idempotency]\nscope_header = \"X-Tenant-Id\"\n{ROUTE}"
    ));
    let (code, stdout, stderr) = check(&old, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("warning: `idempotency.scope_header` is deprecated")
            && stderr.contains("`idempotency.scope_headers`"),
        "{stderr}"
    );
    assert!(
        stdout.contains("scope_headers = [\"x-tenant-id\"]"),
        "{stdout}"
    );
    assert!(!stdout.contains("scope_header ="), "{stdout}");

    let (code, stdout, stderr) = check(
        &config_file(ROUTE),
        &[("IDEMGATE__IDEMPOTENCY__SCOPE_HEADER", "X-Org")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("idempotency.scope_header` is deprecated"),
        "{stderr}"
    );
    assert!(stdout.contains("scope_headers = [\"x-org\"]"), "{stdout}");

    let (code, _, stderr) = check(&old, &[("IDEMGATE__IDEMPOTENCY__SCOPE_HEADERS", "[X-Org]")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("`idempotency.scope_header`")
            && stderr.contains("`idempotency.scope_headers`"),
        "{stderr}"
    );

    let current = config_file(&format!(
        "[idempotency]\nscope_headers = [\"X-Tenant-Id\"]\n{ROUTE}"
    ));
    let (code, _, stderr) = check(&current, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("deprecated"), "{stderr}");
}

/// `serve` with `scope_header = "X-Tenant-Id"` warns at start and scopes keys by that
/// header, as `scope_headers = ["X-Tenant-Id"]` does: one key, two tenants, two executions.
#[tokio::test]
async fn serve_with_the_old_scope_header_warns_and_scopes_by_it() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(
        &redis,
        &upstream,
        "[idempotency]\nscope_header = \"X-Tenant-Id\"\n",
        Stdio::piped(),
    )
    .await;
    let client = reqwest::Client::new();
    let mut replayed = Vec::new();
    for tenant in ["a", "b", "a"] {
        let r = client
            .post(format!("http://127.0.0.1:{}/v1/payments", served.listen))
            .header("Idempotency-Key", "renamed-setting-1")
            .header("X-Tenant-Id", tenant)
            .body("{}")
            .send()
            .await
            .unwrap();
        replayed.push(
            r.headers()["idempotent-replayed"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(replayed, ["false", "false", "true"]);
    assert_eq!(upstream.executions(), 2);
    sigterm(&served.child);
    let out = tokio::task::spawn_blocking(move || served.child.wait_with_output().unwrap())
        .await
        .unwrap();
    let logs = String::from_utf8(out.stderr).unwrap();
    assert!(
        logs.contains("WARN") && logs.contains("`idempotency.scope_header` is deprecated"),
        "{logs}"
    );
}
