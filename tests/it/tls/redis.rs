//! Redis over TLS (`rediss://`): the core behaviours with a private CA, the server
//! name verified (a certificate for another name is refused unless
//! `verify_server_name = false`), a certificate from an untrusted CA refused, mutual
//! TLS, and an ACL user whose password comes from `redis.password_file`.

use std::time::Duration;

use idemgate_fleet::RedisTls;

use crate::support::{
    config, eventually, problem_code, read, MockUpstream, Pki, RedisServer, TestApp,
};

fn server_tls(pki: &Pki, pair: &crate::support::certs::Pair, mutual: bool) -> RedisTls {
    RedisTls {
        cert_file: pair.cert.clone(),
        key_file: pair.key.clone(),
        ca_file: pki.ca.clone(),
        require_client_cert: mutual,
        cli_identity: Some((pki.client.cert.clone(), pki.client.key.clone())),
    }
}

/// `[redis.tls]` lines, and Redis down answers 503 at once.
fn tls_section(lines: &str) -> String {
    format!("[idempotency]\non_redis_unavailable = \"reject\"\n[redis.tls]\n{lines}\n")
}

/// Whether the gateway reaches Redis: `/readyz` turns ready within a few seconds.
async fn becomes_ready(app: &TestApp) -> bool {
    eventually(Duration::from_secs(3), async || {
        app.readyz().await.status() == 200
    })
    .await
}

#[tokio::test]
async fn core_behaviours_over_tls() {
    let pki = Pki::generate();
    let redis = RedisServer::start_tls(server_tls(&pki, &pki.server, false), &[]);
    assert!(redis.url().starts_with("rediss://"));
    let upstream = MockUpstream::start().await;
    let section = tls_section(&format!("ca_file = \"{}\"", pki.ca.display()));
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &section)).await;
    assert!(
        becomes_ready(&app).await,
        "the gateway never reached redis over TLS"
    );

    let first = read(app.post("tls-1", "{\"a\":1}").send().await.unwrap()).await;
    assert_eq!(first.0, 201);
    assert_eq!(first.1["idempotent-replayed"], "false");
    let again = read(app.post("tls-1", "{\"a\":1}").send().await.unwrap()).await;
    assert_eq!(again.1["idempotent-replayed"], "true");
    assert_eq!(again.2, first.2, "the replay is the stored original");
    let other = read(app.post("tls-1", "{\"a\":2}").send().await.unwrap()).await;
    assert_eq!(problem_code(&other.1, &other.2), "idempotency_key_reused");
    assert_eq!(upstream.executions(), 1);
    let keys = redis.cli(&["KEYS", "idemgate:{*}"]);
    assert_eq!(
        keys.lines().count(),
        1,
        "one record stored over TLS: {keys}"
    );
}

#[tokio::test]
async fn server_name_is_verified_by_default() {
    let pki = Pki::generate();
    let redis = RedisServer::start_tls(server_tls(&pki, &pki.wrong_name, false), &[]);
    let upstream = MockUpstream::start().await;
    let ca = format!("ca_file = \"{}\"", pki.ca.display());
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &tls_section(&ca))).await;
    assert!(
        !becomes_ready(&app).await,
        "a certificate for wrong.example was accepted"
    );
    let refused = read(app.post("k", "{}").send().await.unwrap()).await;
    assert_eq!(problem_code(&refused.1, &refused.2), "store_unavailable");
    assert_eq!(upstream.executions(), 0);
    drop(app);

    // The same server with name verification off: the chain alone is enough.
    let lenient = tls_section(&format!("{ca}\nverify_server_name = false"));
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &lenient)).await;
    assert!(
        becomes_ready(&app).await,
        "verify_server_name = false still refused"
    );
}

#[tokio::test]
async fn an_untrusted_ca_is_refused() {
    let pki = Pki::generate();
    // The server's own CA is the other one (so that `redis-cli` can check it is up).
    let tls = RedisTls {
        ca_file: pki.other_ca.clone(),
        cli_identity: None,
        ..server_tls(&pki, &pki.untrusted, false)
    };
    let redis = RedisServer::start_tls(tls, &[]);
    let upstream = MockUpstream::start().await;
    let section = tls_section(&format!(
        "ca_file = \"{}\"\nverify_server_name = false",
        pki.ca.display()
    ));
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &section)).await;
    assert!(
        !becomes_ready(&app).await,
        "a certificate from another CA was accepted"
    );
}

#[tokio::test]
async fn mutual_tls_when_the_server_requires_client_certificates() {
    let pki = Pki::generate();
    let redis = RedisServer::start_tls(server_tls(&pki, &pki.server, true), &[]);
    let upstream = MockUpstream::start().await;
    let ca = format!("ca_file = \"{}\"", pki.ca.display());
    let without = TestApp::spawn(config(&redis.url(), &upstream.url(), &tls_section(&ca))).await;
    assert!(
        !becomes_ready(&without).await,
        "no client certificate, yet accepted"
    );
    drop(without);

    let with = tls_section(&format!(
        "{ca}\ncert_file = \"{}\"\nkey_file = \"{}\"",
        pki.client.cert.display(),
        pki.client.key.display()
    ));
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &with)).await;
    assert!(becomes_ready(&app).await, "mutual TLS did not connect");
    let first = read(app.post("mtls", "{}").send().await.unwrap()).await;
    assert_eq!(first.0, 201);
    let again = read(app.post("mtls", "{}").send().await.unwrap()).await;
    assert_eq!(again.1["idempotent-replayed"], "true");
}

#[tokio::test]
async fn acl_user_with_a_password_file() {
    let pki = Pki::generate();
    let redis = RedisServer::start_tls(server_tls(&pki, &pki.server, false), &[]);
    let reply = redis.cli(&[
        "ACL",
        "SETUSER",
        "gateway",
        "on",
        ">file-pw-7Hq",
        "~*",
        "&*",
        "+@all",
    ]);
    assert!(reply.contains("OK"), "{reply}");
    let reply = redis.cli(&["ACL", "SETUSER", "default", "off"]);
    assert!(reply.contains("OK"), "{reply}");
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("redis-password");
    let url = redis.url().replace("rediss://", "rediss://gateway@");
    let section = tls_section(&format!("ca_file = \"{}\"", pki.ca.display()));
    let configured = |password: &str| {
        std::fs::write(&password_file, format!("{password}\n")).unwrap();
        let mut c = config(&url, &upstream.url(), &section);
        c.redis.password_file = Some(password_file.clone());
        c
    };
    let wrong = TestApp::spawn(configured("not-the-password")).await;
    assert!(
        !becomes_ready(&wrong).await,
        "a wrong password was accepted"
    );
    drop(wrong);
    let app = TestApp::spawn(configured("file-pw-7Hq")).await;
    assert!(
        becomes_ready(&app).await,
        "the password from the file was not used"
    );
    let first = read(app.post("acl", "{}").send().await.unwrap()).await;
    assert_eq!(first.0, 201);
}
