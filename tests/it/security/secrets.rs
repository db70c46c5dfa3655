//! Secrets never leak. The real `idemgate` binary runs at `debug`
//! level against Redis (TLS, an ACL user) and Postgres (TLS), three times:
//!
//! * run A: the Redis password in `redis.url`, the Postgres password from
//!   `postgres.password_file`, the admin token from `admin.token_file`;
//! * run B: the Redis password from `redis.password_file`, the Postgres password in
//!   `postgres.url`, the admin token inline in `admin.token`;
//! * run C: a wrong Redis password in `redis.url` (the authentication failures).
//!
//! All three seal records with an `[encryption]` key file. Every log line, every
//! `check-config` output (a valid and an invalid configuration), every `/readyz` body
//! (all up; Redis down; Redis and Postgres down) and the error answers (admin 401,
//! 503 with both stores down) are scanned for each configured secret.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idemgate_fleet::{free_port, PgTls, RedisTls};

use crate::support::process::BIN;
use crate::support::{eventually, MockUpstream, PgServer, Pki, RedisServer};

const REDIS_PW: &str = "redis-Pw-4f9d1c";
const WRONG_PW: &str = "wrong-Redis-Pw-77e0";
const PG_PW: &str = "pg-Pw-83ab27";
const TOKEN_FILE: &str = "admin-Token-0c55e1d2b7";
const TOKEN_INLINE: &str = "admin-Inline-Token-9a4b";
/// The `[encryption]` key file's content (base64 of 32 bytes, as `openssl rand -base64 32`).
const ENC_KEY: &str = "q83vEjRWeJASNFZ4kKvN7xI0VniQEjRWeJCrze8SNFY=";
const SECRETS: [&str; 6] = [REDIS_PW, WRONG_PW, PG_PW, TOKEN_FILE, TOKEN_INLINE, ENC_KEY];

/// Fails with `what` if any configured secret is in `text`.
fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows a secret: {text}");
    }
}

/// An `idemgate serve` child, killed on drop (a failing assertion never leaves it running).
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    /// Starts `serve` with `config`, appending its stderr (the JSON log) to `log`.
    fn start(config: &Path, log: &Path) -> Self {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        Serve {
            child,
            log: log.to_path_buf(),
        }
    }

    /// SIGTERM and wait for a clean exit (the shutdown path logs too).
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics (with the log) if the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("serve exited ({status}):\n{log}");
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asks `/readyz` until its answer satisfies `want`; returns (status, body).
async fn readyz_until(
    serve: &mut Serve,
    admin: u16,
    what: &str,
    want: impl Fn(u16, &serde_json::Value) -> bool,
) -> (u16, String) {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{admin}/readyz");
    let (mut last, mut shown) = (String::from("(no answer)"), None);
    let showed = eventually(Duration::from_secs(10), async || {
        serve.assert_running();
        let Ok(r) = client.get(&url).send().await else {
            return false;
        };
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_clean("a /readyz body", &body);
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        if want(status, &json) {
            shown = Some((status, body));
            return true;
        }
        last = format!("{status} {body}");
        false
    });
    assert!(showed.await, "/readyz never showed {what}; last: {last}");
    shown.unwrap()
}

fn down(json: &serde_json::Value) -> Vec<&str> {
    (json["down"].as_array().unwrap().iter())
        .map(|d| d.as_str().unwrap())
        .collect()
}

struct Files(tempfile::TempDir);

impl Files {
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.path().join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        path
    }
}

/// Runs `check-config`; (success, stdout + stderr), scanned.
fn check_config(config: &Path) -> (bool, String) {
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(config)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let mut shown = String::from_utf8_lossy(&out.stdout).into_owned();
    shown.push_str(&String::from_utf8_lossy(&out.stderr));
    assert_clean("check-config", &shown);
    (out.status.success(), shown)
}

#[tokio::test]
async fn secrets_appear_in_no_log_line_check_config_output_readyz_body_or_error_answer() {
    let pki = Pki::generate();
    let mut redis = RedisServer::start_tls(
        RedisTls {
            cert_file: pki.server.cert.clone(),
            key_file: pki.server.key.clone(),
            ca_file: pki.ca.clone(),
            require_client_cert: false,
            cli_identity: None,
        },
        &[],
    );
    let acl = format!(">{REDIS_PW}");
    assert!(redis
        .cli(&["ACL", "SETUSER", "gw", "on", &acl, "~*", "&*", "+@all"])
        .contains("OK"));
    let mut pg = PgServer::start_tls(PgTls {
        cert_file: pki.server.cert.clone(),
        key_file: pki.server.key.clone(),
        hostssl_only: true,
    });
    let upstream = MockUpstream::start().await;
    let files = Files(tempfile::tempdir().unwrap());
    let pg_pw = files.write("pg-password", &format!("{PG_PW}\n"));
    let redis_pw = files.write("redis-password", &format!("{REDIS_PW}\n"));
    let token = files.write("admin-token", &format!("{TOKEN_FILE}\n"));
    let key = files.write("k1", &format!("{ENC_KEY}\n"));
    let pg_port = pg.url().rsplit(':').next().unwrap().to_string();
    let pg_port = pg_port.split('/').next().unwrap().to_string();
    let (listen, admin) = (free_port(), free_port());
    // (redis userinfo, redis password_file line, postgres url userinfo, postgres
    // password_file line, admin lines)
    let toml = |r_user: &str, r_file: &str, p_user: &str, p_file: &str, adm: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             [log]\nformat = \"json\"\nfilter = \"debug\"\n\
             [admin]\n{adm}\n\
             [encryption]\nkeys = [{{ id = \"k1\", key_file = \"{}\" }}]\nactive = \"k1\"\n\
             [redis]\nurl = \"rediss://{r_user}@127.0.0.1:{}\"\nconnect_timeout = \"500ms\"\n\
             probe_interval = \"100ms\"\n{r_file}\n\
             [redis.tls]\nca_file = \"{}\"\n\
             [postgres]\nurl = \"postgres://{p_user}@127.0.0.1:{pg_port}/postgres\
             ?sslmode=verify-full&sslrootcert={}\"\nstatement_timeout = \"1s\"\n{p_file}\n\
             [[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
             [routes.idempotency]\nanonymous = \"shared\"\n",
            key.display(),
            redis.port,
            pki.ca.display(),
            pki.ca.display(),
            upstream.url()
        )
    };
    let run_a = files.write(
        "a.toml",
        &toml(
            &format!("gw:{REDIS_PW}"),
            "",
            "postgres",
            &format!("password_file = \"{}\"", pg_pw.display()),
            &format!("token_file = \"{}\"", token.display()),
        ),
    );
    let run_b = files.write(
        "b.toml",
        &toml(
            "gw",
            &format!("password_file = \"{}\"", redis_pw.display()),
            &format!("postgres:{PG_PW}"),
            "",
            &format!("token = \"{TOKEN_INLINE}\""),
        ),
    );
    let run_c = files.write(
        "c.toml",
        &toml(
            &format!("gw:{WRONG_PW}"),
            "",
            "postgres",
            &format!("password_file = \"{}\"", pg_pw.display()),
            &format!("token_file = \"{}\"", token.display()),
        ),
    );
    let all = [&run_a, &run_b, &run_c].map(|p| std::fs::read_to_string(p).unwrap());
    for secret in [REDIS_PW, WRONG_PW, PG_PW, TOKEN_INLINE] {
        assert!(
            all.iter().any(|c| c.contains(secret)),
            "the scan looks for what is configured: {secret}"
        );
    }

    for config in [&run_a, &run_b, &run_c] {
        let (ok, shown) = check_config(config);
        assert!(ok, "{shown}");
        assert!(shown.contains("[encryption]"), "{shown}");
    }
    assert!(check_config(&run_a).1.contains("gw:***@"));
    // An invalid configuration whose error is about a URL with a password in it.
    let bad = std::fs::read_to_string(&run_b)
        .unwrap()
        .replace("postgres://postgres:", "mysql://postgres:");
    let (ok, shown) = check_config(&files.write("bad.toml", &bad));
    assert!(!ok, "a mysql:// url is refused: {shown}");

    let log = files.0.path().join("serve.log");
    let client = reqwest::Client::new();
    let post = |key: &str| {
        client
            .post(format!("http://127.0.0.1:{listen}/v1/pay"))
            .header("Idempotency-Key", key)
            .body("{}")
    };
    let keys = format!("http://127.0.0.1:{admin}/admin/keys/p/leak-1");

    // Run A: all up, then Redis down (Postgres serves), then both down (503).
    let mut serve = Serve::start(&run_a, &log);
    readyz_until(&mut serve, admin, "all up", |s, j| {
        s == 200 && down(j).is_empty()
    })
    .await;
    assert_eq!(post("leak-1").send().await.unwrap().status(), 201);
    assert_eq!(post("leak-1").send().await.unwrap().status(), 201);
    let denied = client.get(&keys).bearer_auth(TOKEN_INLINE).send().await;
    let denied = denied.unwrap();
    assert_eq!(denied.status(), 401, "run A takes the token from the file");
    assert_clean("admin 401", &denied.text().await.unwrap());
    let shown = client.get(&keys).bearer_auth(TOKEN_FILE).send().await;
    let shown = shown.unwrap();
    assert_eq!(shown.status(), 200, "the token from admin.token_file works");
    assert_clean("admin answer", &shown.text().await.unwrap());

    redis.stop();
    // With on_redis_unavailable = "postgres" (the default) a replica whose Postgres
    // is up is still ready: 200, with Redis listed as down.
    readyz_until(&mut serve, admin, "redis down", |s, j| {
        s == 200 && down(j) == ["redis"]
    })
    .await;
    let replay = post("leak-1").send().await.unwrap();
    assert_eq!(replay.status(), 201, "the replay from postgres");
    pg.stop();
    readyz_until(&mut serve, admin, "503, both down", |s, j| {
        s == 503 && down(j) == ["redis", "postgres"]
    })
    .await;
    let refused = post("leak-2").send().await.unwrap();
    assert!(refused.status().is_server_error(), "{}", refused.status());
    assert_clean("a 5xx answer", &refused.text().await.unwrap());
    serve.stop();
    redis.start_again();
    assert!(redis
        .cli(&["ACL", "SETUSER", "gw", "on", &acl, "~*", "&*", "+@all"])
        .contains("OK"));
    pg.restart();

    // Run B: the other half of the sources.
    let mut serve = Serve::start(&run_b, &log);
    readyz_until(&mut serve, admin, "all up", |s, j| {
        s == 200 && down(j).is_empty()
    })
    .await;
    assert_eq!(post("leak-3").send().await.unwrap().status(), 201);
    let keys3 = format!("http://127.0.0.1:{admin}/admin/keys/p/leak-3");
    let shown = client.get(&keys3).bearer_auth(TOKEN_INLINE).send().await;
    let shown = shown.unwrap();
    assert_eq!(shown.status(), 200, "the inline admin.token works");
    assert_clean("admin answer", &shown.text().await.unwrap());
    serve.stop();

    // Run C: a wrong Redis password; the authentication failures are logged.
    let mut serve = Serve::start(&run_c, &log);
    readyz_until(&mut serve, admin, "redis down", |_, j| {
        down(j).contains(&"redis")
    })
    .await;
    serve.stop();

    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(lines.lines().count() > 10, "the gateway logged: {lines}");
    assert!(
        lines.contains("\"level\":\"DEBUG\""),
        "debug lines are scanned too"
    );
    for line in lines.lines() {
        assert_clean("a log line", line);
    }
}
