//! HTTP/2 to upstreams (`routes.upstream_protocol`): `h2c` in the clear and `h2` over
//! TLS chosen by ALPN, for keyed requests (executed once, replayed byte-identical, the
//! upstream seeing HTTP/2) and unkeyed ones; an `h2` route whose upstream does not offer
//! `h2` fails to connect (nothing sent, the key released), instead of falling back.

use std::sync::Arc;

use futures_util::future::join_all;
use http::Version;

use crate::support::{
    comparable, config, problem_code, read, MockUpstream, Pki, RedisServer, TestApp,
};

/// The test PKI's server certificate with these ALPN protocols.
fn alpn(pki: &Pki, protocols: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    let mut config = Arc::unwrap_or_clone(Pki::server_config(&pki.server));
    config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

#[tokio::test]
async fn an_h2c_route_executes_each_key_once_and_the_upstream_sees_http2() {
    let upstream = MockUpstream::start().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn(config(
        &redis.url(),
        &upstream.url(),
        "upstream_protocol = \"h2c\"\n",
    ))
    .await;

    let app = &app;
    let firsts = join_all((0..20).map(|i| async move {
        let key = format!("h2c-{i}");
        read(app_post(app, &key).await).await
    }))
    .await;
    assert!(
        firsts.iter().all(|r| r.0 == 201),
        "{:?}",
        firsts.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    assert_eq!(upstream.executions(), 20);
    assert!(
        upstream.seen().iter().all(|s| s.version == Version::HTTP_2),
        "the upstream saw HTTP/1"
    );
    for (i, first) in firsts.iter().enumerate() {
        let again = read(app_post(app, &format!("h2c-{i}")).await).await;
        assert_eq!(again.1["idempotent-replayed"], "true");
        assert_eq!((again.0, &again.2), (first.0, &first.2));
        let (mut a, mut b) = (comparable(&again.1), comparable(&first.1));
        a.retain(|(n, _)| n != "idempotent-replayed");
        b.retain(|(n, _)| n != "idempotent-replayed");
        assert_eq!(a, b, "replayed headers differ");
    }
    assert_eq!(upstream.executions(), 20);
    let plain = app.client.get(app.url("/v1/unkeyed")).send().await.unwrap();
    assert_eq!(plain.status(), 201);
    assert_eq!(upstream.seen().last().unwrap().version, Version::HTTP_2);
}

async fn app_post(app: &TestApp, key: &str) -> reqwest::Response {
    app.post(key, "{\"n\":1}").send().await.unwrap()
}

#[tokio::test]
async fn an_h2_route_speaks_http2_by_alpn_and_refuses_an_upstream_without_it() {
    let pki = Pki::generate();
    let redis = RedisServer::start();
    let with_h2 = MockUpstream::start_tls(alpn(&pki, &[b"h2", b"http/1.1"])).await;
    let only_h1 = MockUpstream::start_tls(alpn(&pki, &[b"http/1.1"])).await;
    let route = |upstream: &MockUpstream| {
        let url = format!("https://localhost:{}", upstream.addr.port());
        let extra = format!(
            "upstream_protocol = \"h2\"\n[routes.tls]\nca_file = \"{}\"\n",
            pki.ca.display()
        );
        config(&redis.url(), &url, &extra)
    };

    let app = TestApp::spawn(route(&with_h2)).await;
    let first = read(app_post(&app, "h2-1").await).await;
    let again = read(app_post(&app, "h2-1").await).await;
    assert_eq!((first.0, again.0), (201, 201), "{:?}", first.2);
    assert_eq!(
        (again.1["idempotent-replayed"].to_str().unwrap(), &again.2),
        ("true", &first.2)
    );
    assert_eq!(with_h2.executions(), 1);
    assert_eq!(with_h2.seen()[0].version, Version::HTTP_2);

    let app = TestApp::spawn(route(&only_h1)).await;
    let refused = read(app_post(&app, "h2-2").await).await;
    assert_eq!(refused.0, 502, "{:?}", refused.2);
    assert_eq!(problem_code(&refused.1, &refused.2), "upstream_unavailable");
    assert_eq!(only_h1.executions(), 0, "nothing was sent in HTTP/1");
}
