//! HTTPS upstreams: first execution and replay through TLS with a per-route
//! `ca_file` (and SNI sent for a host name), an untrusted certificate (the system
//! roots do not know the test CA) answered 502 `upstream_unavailable` with the key
//! released, and the explicit `insecure_skip_verify` opt-out.

use crate::support::{config, problem_code, read, MockUpstream, Pki, RedisServer, TestApp};

#[tokio::test]
async fn first_execution_and_replay_over_https() {
    let pki = Pki::generate();
    let upstream = MockUpstream::start_tls(Pki::server_config(&pki.server)).await;
    let redis = RedisServer::start();
    // By name, so that SNI is sent (rustls sends none for an IP address).
    let url = format!("https://localhost:{}", upstream.addr.port());
    let tls = format!("[routes.tls]\nca_file = \"{}\"\n", pki.ca.display());
    let app = TestApp::spawn(config(&redis.url(), &url, &tls)).await;

    let first = read(app.post("https-1", "{\"n\":1}").send().await.unwrap()).await;
    assert_eq!(first.0, 201, "{:?}", first.2);
    assert_eq!(first.1["idempotent-replayed"], "false");
    let again = read(app.post("https-1", "{\"n\":1}").send().await.unwrap()).await;
    assert_eq!(again.1["idempotent-replayed"], "true");
    assert_eq!(again.2, first.2);
    assert_eq!(upstream.executions(), 1);
    // Unkeyed requests stream through the same client.
    let plain = app
        .client
        .get(app.url("/v1/anything"))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 201);
    let sni = upstream.sni();
    assert!(
        !sni.is_empty() && sni.iter().all(|s| s.as_deref() == Some("localhost")),
        "{sni:?}"
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_502_that_releases_the_key() {
    let pki = Pki::generate();
    let upstream = MockUpstream::start_tls(Pki::server_config(&pki.server)).await;
    let redis = RedisServer::start();
    // No ca_file: the system roots, which do not include the test CA.
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), "")).await;
    for _ in 0..2 {
        let refused = read(app.post("https-2", "{}").send().await.unwrap()).await;
        assert_eq!(refused.0, 502);
        assert_eq!(problem_code(&refused.1, &refused.2), "upstream_unavailable");
    }
    assert_eq!(upstream.executions(), 0, "nothing reached the upstream");
    assert!(
        redis.records().await.is_empty(),
        "the key was released, nothing stored"
    );
    assert!(upstream.sni().is_empty(), "no handshake completed");
}

#[tokio::test]
async fn verification_can_be_turned_off_explicitly() {
    let pki = Pki::generate();
    let upstream = MockUpstream::start_tls(Pki::server_config(&pki.wrong_name)).await;
    let tls = "[routes.tls]\ninsecure_skip_verify = true\n";
    let redis = RedisServer::start();
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), tls)).await;
    let first = read(app.post("https-3", "{}").send().await.unwrap()).await;
    assert_eq!(first.0, 201);

    // And the name is checked when it is on, even with the right CA.
    let tls = format!("[routes.tls]\nca_file = \"{}\"\n", pki.ca.display());
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &tls)).await;
    let refused = read(app.post("https-4", "{}").send().await.unwrap()).await;
    assert_eq!(
        refused.0, 502,
        "a certificate for wrong.example was accepted"
    );
    assert_eq!(upstream.executions(), 1);
}
