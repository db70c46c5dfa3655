//! Secrets never leak: the `idemgate` binary runs against Redis (an ACL user whose
//! password is in `redis.url`) and Postgres (TLS, `postgres.password_file`), with the
//! admin token from `admin.token_file`, logging at `debug`; every log line, the
//! `check-config` output and every `/readyz` body (Redis up, then down) are scanned
//! for the configured secrets. A second run with a wrong Redis password covers the
//! authentication-failure paths.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idemgate_fleet::{free_port, PgTls, RedisTls};

use crate::support::{MockUpstream, PgServer, Pki, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_idemgate");
const REDIS_PW: &str = "redis-Pw-4f9d1c";
const PG_PW: &str = "pg-Pw-83ab27";
const TOKEN: &str = "admin-Token-0c55e1d2b7";

/// Fails with `what` if any secret is in `text`.
fn assert_clean(what: &str, text: &str) {
    for secret in [REDIS_PW, PG_PW, TOKEN] {
        assert!(!text.contains(secret), "{what} shows a secret: {text}");
    }
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        path
    }
}

#[tokio::test]
#[ignore = "unfinished: hangs after the checks run (see the helper's report); run with --ignored"]
async fn secrets_appear_in_no_log_line_check_config_output_or_readyz_body() {
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
    let pg = PgServer::start_tls(PgTls {
        cert_file: pki.server.cert.clone(),
        key_file: pki.server.key.clone(),
        hostssl_only: true,
    });
    let upstream = MockUpstream::start().await;
    let files = Files {
        dir: tempfile::tempdir().unwrap(),
    };
    let pg_pw = files.write("pg-password", &format!("{PG_PW}\n"));
    let token = files.write("admin-token", &format!("{TOKEN}\n"));
    let (listen, admin, redis_port) = (free_port(), free_port(), redis.port);
    let toml = |redis_pw: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             [log]\nformat = \"json\"\nfilter = \"debug\"\n\
             [admin]\ntoken_file = \"{}\"\n\
             [redis]\nurl = \"rediss://gw:{redis_pw}@127.0.0.1:{}\"\nconnect_timeout = \"500ms\"\n\
             [redis.tls]\nca_file = \"{}\"\n\
             [postgres]\nurl = \"{}?sslmode=verify-full&sslrootcert={}\"\npassword_file = \"{}\"\n\
             [[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
             [routes.idempotency]\nanonymous = \"shared\"\n",
            token.display(),
            redis_port,
            pki.ca.display(),
            pg.url(),
            pki.ca.display(),
            pg_pw.display(),
            upstream.url()
        )
    };
    let config = files.write("idemgate.toml", &toml(REDIS_PW));
    assert!(
        std::fs::read_to_string(&config).unwrap().contains(REDIS_PW),
        "the scan looks for what is configured"
    );

    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.contains("gw:***@"), "{shown}");
    assert_clean("check-config", &shown);
    assert_clean("check-config stderr", &String::from_utf8_lossy(&out.stderr));

    let log = files.write("serve.log", "");
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let readyz = format!("http://127.0.0.1:{admin}/readyz");
    let ready_body = async |want: u16| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(r) = client.get(&readyz).send().await {
                if r.status() == want {
                    return r.text().await.unwrap();
                }
            }
            assert!(Instant::now() < deadline, "readyz never answered {want}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_clean("/readyz", &ready_body(200).await);
    let post = || {
        client
            .post(format!("http://127.0.0.1:{listen}/v1/pay"))
            .header("Idempotency-Key", "leak-1")
            .body("{}")
    };
    assert_eq!(post().send().await.unwrap().status(), 201);
    assert_eq!(post().send().await.unwrap().status(), 201);
    let keys = format!("http://127.0.0.1:{admin}/admin/keys/p/leak-1");
    let denied = client
        .get(&keys)
        .bearer_auth("wrong-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    assert_clean("admin 401", &denied.text().await.unwrap());
    let shown = client.get(&keys).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(shown.status(), 200, "the token from admin.token_file works");
    assert_clean("admin answer", &shown.text().await.unwrap());

    redis.stop();
    assert_clean("/readyz with redis down", &ready_body(503).await);
    assert_eq!(
        post().send().await.unwrap().status(),
        201,
        "the replay from postgres"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();

    // A wrong Redis password: the authentication failures are logged too.
    redis.start_again();
    let wrong = files.write("wrong.toml", &toml("not-the-password"));
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&wrong)
        .env_remove("RUST_LOG")
        .stderr(Stdio::from(
            std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    assert_clean("/readyz with a wrong password", &ready_body(503).await);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();

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
