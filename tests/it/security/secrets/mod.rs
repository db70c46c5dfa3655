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

mod serve;

use std::path::{Path, PathBuf};

use idemgate_fleet::{free_port, PgTls, RedisTls};

use crate::support::{MockUpstream, PgServer, Pki, RedisServer};
use serve::{check_config, down, readyz_until, Files, Serve};

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
    add_the_gateway_user(&redis);
    let mut pg = PgServer::start_tls(PgTls {
        cert_file: pki.server.cert.clone(),
        key_file: pki.server.key.clone(),
        hostssl_only: true,
    });
    let upstream = MockUpstream::start().await;
    let files = Files(tempfile::tempdir().unwrap());
    let (listen, admin) = (free_port(), free_port());
    let stores = Stores {
        pki: &pki,
        redis: &redis,
        pg: &pg,
        upstream: &upstream,
    };
    let [run_a, run_b, run_c] = write_configs(&files, &stores, listen, admin);
    check_configs(&files, [&run_a, &run_b, &run_c]);

    let gw = Gateway {
        listen,
        admin,
        log: files.0.path().join("serve.log"),
        client: reqwest::Client::new(),
    };
    run_a_while_the_stores_go_down(&gw, &run_a, &mut redis, &mut pg).await;
    redis.start_again();
    add_the_gateway_user(&redis);
    pg.restart();
    run_b_with_the_other_sources(&gw, &run_b).await;

    // Run C: a wrong Redis password; the authentication failures are logged.
    let mut serve = Serve::start(&run_c, &gw.log);
    readyz_until(&mut serve, admin, "redis down", |_, j| {
        down(j).contains(&"redis")
    })
    .await;
    serve.stop();

    let lines = std::fs::read_to_string(&gw.log).unwrap();
    assert!(lines.lines().count() > 10, "the gateway logged: {lines}");
    assert!(
        lines.contains("\"level\":\"DEBUG\""),
        "debug lines are scanned too"
    );
    for line in lines.lines() {
        assert_clean("a log line", line);
    }
}

/// Redis' ACL user `gw`, with [`REDIS_PW`].
fn add_the_gateway_user(redis: &RedisServer) {
    let acl = format!(">{REDIS_PW}");
    assert!(redis
        .cli(&["ACL", "SETUSER", "gw", "on", &acl, "~*", "&*", "+@all"])
        .contains("OK"));
}

/// What the configurations point at.
struct Stores<'a> {
    pki: &'a Pki,
    redis: &'a RedisServer,
    pg: &'a PgServer,
    upstream: &'a MockUpstream,
}

/// The secret files and the configurations of runs A, B and C (the module's doc), for a
/// gateway on `listen` and `admin`.
fn write_configs(files: &Files, s: &Stores, listen: u16, admin: u16) -> [PathBuf; 3] {
    let (pki, redis, pg, upstream) = (s.pki, s.redis, s.pg, s.upstream);
    let pg_pw = files.write("pg-password", &format!("{PG_PW}\n"));
    let redis_pw = files.write("redis-password", &format!("{REDIS_PW}\n"));
    let token = files.write("admin-token", &format!("{TOKEN_FILE}\n"));
    let key = files.write("k1", &format!("{ENC_KEY}\n"));
    let pg_port = pg.url().rsplit(':').next().unwrap().to_string();
    let pg_port = pg_port.split('/').next().unwrap().to_string();
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
    [run_a, run_b, run_c]
}

/// The configurations hold the secrets the scan looks for, and `check-config` shows
/// none of them, for them and for an invalid one whose error is about a URL.
fn check_configs(files: &Files, [run_a, run_b, run_c]: [&PathBuf; 3]) {
    let all = [run_a, run_b, run_c].map(|p| std::fs::read_to_string(p).unwrap());
    for secret in [REDIS_PW, WRONG_PW, PG_PW, TOKEN_INLINE] {
        assert!(
            all.iter().any(|c| c.contains(secret)),
            "the scan looks for what is configured: {secret}"
        );
    }

    for config in [run_a, run_b, run_c] {
        let (ok, shown) = check_config(config);
        assert!(ok, "{shown}");
        assert!(shown.contains("[encryption]"), "{shown}");
    }
    assert!(check_config(run_a).1.contains("gw:***@"));
    // An invalid configuration whose error is about a URL with a password in it.
    let bad = std::fs::read_to_string(run_b)
        .unwrap()
        .replace("postgres://postgres:", "mysql://postgres:");
    let (ok, shown) = check_config(&files.write("bad.toml", &bad));
    assert!(!ok, "a mysql:// url is refused: {shown}");
}

/// The gateway of every run: its listeners, its log (all runs append to it), a client.
struct Gateway {
    listen: u16,
    admin: u16,
    log: PathBuf,
    client: reqwest::Client,
}

impl Gateway {
    /// A keyed POST to the route.
    fn post(&self, key: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("http://127.0.0.1:{}/v1/pay", self.listen))
            .header("Idempotency-Key", key)
            .body("{}")
    }
}

/// Run A: all up, then Redis down (Postgres serves), then both down (503); the admin
/// API's 401 and answers, the replay from Postgres and the 5xx are scanned.
async fn run_a_while_the_stores_go_down(
    gw: &Gateway,
    run_a: &Path,
    redis: &mut RedisServer,
    pg: &mut PgServer,
) {
    let (client, admin) = (&gw.client, gw.admin);
    let post = |key: &str| gw.post(key);
    let keys = format!("http://127.0.0.1:{admin}/admin/keys/p/leak-1");

    let mut serve = Serve::start(run_a, &gw.log);
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
}

/// Run B: the other half of the sources; the inline admin token works, its answer is
/// scanned.
async fn run_b_with_the_other_sources(gw: &Gateway, run_b: &Path) {
    let (client, admin) = (&gw.client, gw.admin);
    let mut serve = Serve::start(run_b, &gw.log);
    readyz_until(&mut serve, admin, "all up", |s, j| {
        s == 200 && down(j).is_empty()
    })
    .await;
    assert_eq!(gw.post("leak-3").send().await.unwrap().status(), 201);
    let keys3 = format!("http://127.0.0.1:{admin}/admin/keys/p/leak-3");
    let shown = client.get(&keys3).bearer_auth(TOKEN_INLINE).send().await;
    let shown = shown.unwrap();
    assert_eq!(shown.status(), 200, "the inline admin.token works");
    assert_clean("admin answer", &shown.text().await.unwrap());
    serve.stop();
}
