//! The `idemgate` binary: configuration errors, redaction, environment overrides, and
//! graceful shutdown on SIGTERM, and `idemgate health` (exit 0 only when `/readyz` is 200).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::process::{config_file, until_ready, BIN};
use crate::support::{MockUpstream, RedisServer};

const ROUTE: &str = "[[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\n\
                     upstream = \"http://127.0.0.1:3000\"\nupstream_timeout = \"20s\"\n";

fn check(file: &tempfile::NamedTempFile, env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("check-config")
        .arg("--config")
        .arg(file.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap(),
        text(out.stdout),
        text(out.stderr),
    )
}

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

/// A running `idemgate serve` on free ports; `extra` TOML is appended.
struct Served {
    child: std::process::Child,
    listen: u16,
    admin: u16,
    _file: tempfile::NamedTempFile,
}

async fn serve(redis: &RedisServer, upstream: &MockUpstream, extra: &str, stderr: Stdio) -> Served {
    let (listen, admin) = (idemgate_fleet::free_port(), idemgate_fleet::free_port());
    let file = config_file(&format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         shutdown_grace = \"10s\"\n[redis]\nurl = \"{}\"\n{extra}\n[[routes]]\nname = \"p\"\n\
         path_prefix = \"/v1/\"\nupstream = \"{}\"\nupstream_timeout = \"5s\"\n\
         [routes.idempotency]\nanonymous = \"shared\"\n",
        redis.url(),
        upstream.url()
    ));
    let child = Command::new(BIN)
        .arg("serve")
        .env("IDEMGATE_CONFIG", file.path())
        .env_remove("RUST_LOG")
        .stderr(stderr)
        .spawn()
        .unwrap();
    until_ready(admin, Duration::from_secs(15)).await;
    Served {
        child,
        listen,
        admin,
        _file: file,
    }
}

fn sigterm(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    // A keyed request: its upstream call runs in a detached task (`app.tasks`).
    sigterm_with_a_slow_request_in_flight(true, false).await;
}

#[tokio::test]
async fn sigterm_drains_an_in_flight_pass_through_request() {
    // Unkeyed, so proxied without idempotency: only the connection drain
    // (`GracefulShutdown`) keeps the process alive until its answer is written.
    sigterm_with_a_slow_request_in_flight(false, false).await;
}

#[tokio::test]
async fn sigterm_drains_an_in_flight_http2_stream() {
    // Unkeyed over h2c: the connection's graceful shutdown (GOAWAY) lets the stream
    // already open finish.
    sigterm_with_a_slow_request_in_flight(false, true).await;
}

async fn sigterm_with_a_slow_request_in_flight(keyed: bool, h2: bool) {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_millis(1200));
    let Served {
        mut child,
        listen,
        _file,
        ..
    } = serve(&redis, &upstream, "", Stdio::null()).await;
    let client = match h2 {
        true => reqwest::Client::builder().http2_prior_knowledge().build(),
        false => reqwest::Client::builder().build(),
    };
    let mut request = (client.unwrap())
        .post(format!("http://127.0.0.1:{listen}/v1/payments"))
        .body("{}");
    if keyed {
        request = request.header("Idempotency-Key", "drain");
    }
    let in_flight = tokio::spawn(request.send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigterm(&child);

    let answer = in_flight
        .await
        .unwrap()
        .expect("in-flight request completes");
    assert_eq!(answer.status(), 201);
    let version = [reqwest::Version::HTTP_11, reqwest::Version::HTTP_2][usize::from(h2)];
    assert_eq!(answer.version(), version);
    assert_eq!(
        answer.text().await.unwrap(),
        "{\"execution\":1,\"status\":201}"
    );
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(exit.code(), Some(0));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", listen)).is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn json_logs_have_one_line_per_request_and_never_the_raw_key() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(
        &redis,
        &upstream,
        "[log]\nformat = \"json\"\n",
        Stdio::piped(),
    )
    .await;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        client
            .post(format!("http://127.0.0.1:{}/v1/payments", served.listen))
            .header("Idempotency-Key", "secret-key-zzz")
            .header("Authorization", "Bearer top-secret-token")
            .body("{\"card\":\"4242-very-private\"}")
            .send()
            .await
            .unwrap();
    }
    sigterm(&served.child);
    let out = tokio::task::spawn_blocking(move || served.child.wait_with_output().unwrap())
        .await
        .unwrap();
    let logs = String::from_utf8(out.stderr).unwrap();
    for secret in ["secret-key-zzz", "top-secret-token", "4242-very-private"] {
        assert!(
            !logs.contains(secret),
            "{secret} leaked into the logs:\n{logs}"
        );
    }
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["message"] == "request")
        .collect();
    assert_eq!(lines.len(), 2, "one line per request:\n{logs}");
    assert_eq!(lines[0]["outcome"], "executed");
    assert_eq!(lines[1]["outcome"], "replayed");
    for line in &lines {
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["route"], "p");
        assert_eq!(line["status"], 201);
        assert!(line["duration_ms"].is_number());
        assert_eq!(line["key_hash"].as_str().unwrap().len(), 12);
        assert_eq!(line["scope_hash"].as_str().unwrap().len(), 64);
        assert_eq!(line["request_id"].as_str().unwrap().len(), 32);
    }
}

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
    // the write-through, looked up), then rolls them back.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_stderr_drops_log_lines_but_never_stalls_requests() {
    // stderr is a pipe nobody reads: it fills after a few hundred lines. Requests must
    // keep being served; the lines that do not fit are dropped and counted.
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(
        &redis,
        &upstream,
        "[log]\nqueue_lines = 16\n",
        Stdio::piped(),
    )
    .await;
    let (listen, admin) = (served.listen, served.admin);
    let _killed_on_drop = KillOnDrop(served.child);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for i in 0..1500 {
        let answer = client
            .post(format!("http://127.0.0.1:{listen}/v1/payments"))
            .header("Idempotency-Key", format!("stuck-stderr-{i}"))
            .body("{}")
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} with stderr full: {e}"));
        assert_eq!(answer.status(), 201, "request {i}");
    }
    let metrics = client
        .get(format!("http://127.0.0.1:{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped: u64 = (metrics.lines())
        .find_map(|l| l.strip_prefix("idemgate_log_lines_dropped_total "))
        .expect("dropped lines counter on /metrics")
        .parse()
        .unwrap();
    assert!(dropped > 0, "a full pipe drops lines: {dropped}");
}

/// Kills the gateway even when the test fails half way.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `idemgate health --config FILE`: its exit code and what it printed.
fn health(file: &tempfile::NamedTempFile) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["health", "--timeout", "3s", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap(), text)
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
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let (code, text) = health(&served._file);
        if code == 1 {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "still healthy without Redis: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
