//! A tenant scope that cannot be shared by accident. Anonymous callers are
//! refused unless a route opts in; the scope may take several headers, each at most
//! once; cookies are not replayed; scope and record ids are keyed by a server secret,
//! and records stored before the secret are still found during the upgrade.

use std::io::Write;

use futures_util::future::join_all;
use idemgate::idempotency::{key, RecordId, Scope};

use crate::support::{config, durable_stack, problem_code, read, stack, tally};
use crate::support::{MockUpstream, PgServer, RedisServer, TestApp};

#[tokio::test]
async fn keyed_requests_without_a_tenant_are_refused_by_default() {
    let (_redis, upstream, app) = stack("[idempotency]\nanonymous = \"reject\"\n").await;
    let (status, headers, body) = read(app.post("k", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (400, "idempotency_scope_missing")
    );
    assert_eq!(upstream.executions(), 0, "nothing forwarded");
    // With a tenant the same request runs.
    let r = app
        .post("k", "{}")
        .header("Authorization", "Bearer a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The default really is "reject": a config that says nothing refuses too.
    let quiet = idemgate::Config::from_toml("").unwrap();
    assert_eq!(
        quiet.idempotency.anonymous,
        idemgate::config::AnonymousScope::Reject
    );
}

#[tokio::test]
async fn the_scope_can_take_several_headers_each_present_once() {
    let (_redis, upstream, app) =
        stack("[idempotency]\nscope_headers = [\"X-Tenant-Id\", \"Authorization\"]\n").await;
    let send = |tenant: &'static str, token: &'static str| {
        app.post("k", "{}")
            .header("X-Tenant-Id", tenant)
            .header("Authorization", token)
            .send()
    };
    let (_, h1, _) = read(send("acme", "Bearer 1").await.unwrap()).await;
    let (_, h2, _) = read(send("acme", "Bearer 1").await.unwrap()).await;
    let (_, h3, _) = read(send("globex", "Bearer 1").await.unwrap()).await;
    assert_eq!(h1["idempotent-replayed"], "false");
    assert_eq!(h2["idempotent-replayed"], "true", "same tenant: replay");
    assert_eq!(
        h3["idempotent-replayed"], "false",
        "another tenant: its own key"
    );
    assert_eq!(upstream.executions(), 2);

    let duplicated = app
        .post("k", "{}")
        .header("X-Tenant-Id", "acme")
        .header("X-Tenant-Id", "globex")
        .send()
        .await
        .unwrap();
    let (status, headers, body) = read(duplicated).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (400, "idempotency_scope_duplicated")
    );
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn cookies_go_to_the_first_client_only() {
    let (redis, _upstream, app) = stack("[idempotency]\nreplay_set_cookie = false\n").await;
    let (_, first, body1) = read(app.post("c", "{}").send().await.unwrap()).await;
    assert_eq!(
        first.get_all("set-cookie").iter().count(),
        2,
        "the upstream's cookies"
    );
    let (_, replay, body2) = read(app.post("c", "{}").send().await.unwrap()).await;
    assert_eq!(replay["idempotent-replayed"], "true");
    assert_eq!(body2, body1);
    assert!(
        replay.get("set-cookie").is_none(),
        "cookies are not replayed"
    );
    // Nor stored: Redis holds no cookie for anyone to read.
    let records = redis.records().await;
    assert_eq!(records.len(), 1);
    let stored = String::from_utf8_lossy(&redis.record_field(&records[0], "r").await.unwrap())
        .to_ascii_lowercase();
    assert!(
        stored.contains("x-execution"),
        "the stored response: {stored}"
    );
    assert!(
        !stored.contains("set-cookie"),
        "no cookie at rest: {stored}"
    );
}

/// A secret file with `contents`.
fn secret_file(contents: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(contents.as_bytes()).unwrap();
    f
}

fn unkeyed_record(raw_key: &str) -> RecordId {
    let scope = Scope::anonymous("payments", &[http::header::AUTHORIZATION], None);
    RecordId::new(scope, &key::parse(raw_key.as_bytes(), 255).unwrap(), None)
}

#[tokio::test]
async fn a_scope_secret_keys_every_id_and_readyz_says_so() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let plain = TestApp::spawn(config(&redis.url(), &upstream.url(), "")).await;
    let ready: serde_json::Value = plain.readyz().await.json().await.unwrap();
    assert_eq!(ready["scope_ids"], "unkeyed");
    assert!(ready["warnings"][0]
        .as_str()
        .unwrap()
        .contains("scope_secret_file"));

    let secret = secret_file("a-long-enough-server-secret\n");
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.idempotency.scope_secret_file = Some(secret.path().to_path_buf());
    let keyed = TestApp::spawn(cfg).await;
    let ready: serde_json::Value = keyed.readyz().await.json().await.unwrap();
    assert_eq!(ready["scope_ids"], "keyed");
    assert_eq!(keyed.post("s", "{}").send().await.unwrap().status(), 201);
    let keys = redis.records().await;
    assert_eq!(keys.len(), 1);
    assert!(
        !keys[0].contains(&unkeyed_record("s").to_hex()),
        "the id is not the plain hash anyone can recompute"
    );
    // A secret too short to be one is refused at start.
    let short = secret_file("short");
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.idempotency.scope_secret_file = Some(short.path().to_path_buf());
    let e = idemgate::App::build(cfg).await.err().expect("refused");
    assert!(format!("{e:#}").contains("scope_secret_file"), "{e:#}");
}

/// Records written before the secret was introduced replay during the upgrade window,
/// even to a burst of concurrent duplicates on replicas that already use the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_from_before_the_secret_are_found_during_the_upgrade() {
    let (redis, pg, upstream, before) = durable_stack("", "").await;
    let mut old = std::collections::HashMap::new();
    for k in ["burst", "cold", "unaware"] {
        let (status, _, body) = read(before.post(k, r#"{"n":1}"#).send().await.unwrap()).await;
        assert_eq!(status, 201);
        old.insert(k, body);
    }
    drop(before);

    let secret = secret_file("a-long-enough-server-secret\n");
    let upgraded = |lookup: bool| {
        let toml = pg.section("");
        let mut cfg = config(&redis.url(), &upstream.url(), &toml);
        cfg.idempotency.scope_secret_file = Some(secret.path().to_path_buf());
        cfg.idempotency.lookup_unkeyed_ids = lookup;
        TestApp::spawn(cfg)
    };
    // Without the lookup, an old record is not found: that is what the flag is for.
    let unaware = upgraded(false).await;
    let (_, h, _) = read(unaware.post("unaware", r#"{"n":1}"#).send().await.unwrap()).await;
    assert_eq!(h["idempotent-replayed"], "false");
    assert_eq!(upstream.executions(), 4);

    let after = upgraded(true).await;
    let answers =
        join_all((0..10).map(|_| async {
            read(after.post("burst", r#"{"n":1}"#).send().await.unwrap()).await
        }))
        .await;
    let t = tally(&answers);
    assert_eq!(t.first, 0, "none runs again: {t:?}");
    assert!(t.replayed >= 1, "{t:?}");
    let replays = answers.iter().filter(|(s, _, _)| *s == 201);
    assert!(
        replays.clone().all(|(_, _, b)| *b == old["burst"]),
        "the old bytes"
    );
    // Copied to its new id: a retry now replays without the old lookup.
    let (_, h, b) = read(after.post("burst", r#"{"n":1}"#).send().await.unwrap()).await;
    assert_eq!(
        (&h["idempotent-replayed"], &b),
        (&"true".parse().unwrap(), &old["burst"])
    );
    // From Postgres, once Redis forgot the old record.
    redis.cli(&["FLUSHALL"]);
    let (_, h, b) = read(after.post("cold", r#"{"n":1}"#).send().await.unwrap()).await;
    assert_eq!(
        (&h["idempotent-replayed"], &b),
        (&"true".parse().unwrap(), &old["cold"])
    );
    // A different body under an old key is still a mismatch.
    let (status, _, _) = read(after.post("cold", r#"{"n":2}"#).send().await.unwrap()).await;
    assert_eq!(status, 422);
    assert_eq!(upstream.executions(), 4, "no old key ran again");
}

#[tokio::test]
async fn the_admin_api_takes_the_tenant_in_a_header_never_the_query() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let token = "t".repeat(32);
    let cfg = config(
        &redis.url(),
        &upstream.url(),
        &format!("[admin]\ntoken = \"{token}\"\n"),
    );
    let app = TestApp::spawn(cfg).await;
    let url = format!(
        "http://{}/admin/keys/payments/k?tenant=Bearer%20a",
        app.admin
    );
    let r = (app.client.get(url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let (status, headers, body) = read(r).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (400, "admin_bad_query")
    );
}

#[tokio::test]
async fn readyz_names_no_backend_detail() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let toml = pg.section("");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml)).await;
    drop(pg);
    drop(redis);
    let text = app.readyz().await.text().await.unwrap();
    assert!(text.contains("\"down\""), "{text}");
    for leak in ["127.0.0.1", "postgres@", "Connection refused", "os error"] {
        assert!(!text.contains(leak), "readyz leaks {leak:?}: {text}");
    }
}

/// The shipped example scopes on a stable tenant header set by the auth layer,
/// not on a credential that changes when it is refreshed; docs/security.md says why.
#[test]
fn the_example_config_scopes_on_a_stable_tenant_header() {
    let root = env!("CARGO_MANIFEST_DIR");
    let demo = std::fs::read_to_string(format!("{root}/deploy/local/idemgate.toml")).unwrap();
    let config = idemgate::Config::from_toml(&demo).unwrap();
    assert_eq!(config.idempotency.scope_headers[0], "X-Tenant-Id");
    let security = std::fs::read_to_string(format!("{root}/docs/security.md")).unwrap();
    assert!(security.contains("Use a stable tenant header set by your auth layer"));
    assert!(security.contains("scope_headers = [\"X-Tenant-Id\"]"));
    // The README's quick start sends the tenant header the demo scopes on.
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    assert!(readme.contains("-H 'X-Tenant-Id: acme'"));
}
