//! Upstream failures: which answers are stored, and which release the key so that a
//! retry runs again.

use crate::support::{config, problem_code, read, stack, RedisServer, TestApp};

#[tokio::test]
async fn upstream_503_releases_the_key() {
    let (redis, upstream, app) = stack("").await;
    upstream.push_statuses(&[503]);
    let (status, headers, _) = read(app.post("flaky", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503, "the upstream's own answer is passed on");
    assert_eq!(headers["idempotent-replayed"], "false");
    assert!(redis.records().await.is_empty(), "released, not stored");
    let (status, headers, _) = read(app.post("flaky", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    assert_eq!(upstream.executions(), 2);
    let r = app.post("flaky", "{}").send().await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
}

#[tokio::test]
async fn release_statuses_are_configurable_per_route() {
    let (_redis, upstream, app) = stack("[routes.idempotency]\nrelease_statuses = [500]\n").await;
    upstream.push_statuses(&[503, 500]);
    let (status, _, _) = read(app.post("a", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503);
    let r = app.post("a", "{}").send().await.unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            r.headers()["idempotent-replayed"].to_str().unwrap()
        ),
        (503, "true")
    );
    let (status, _, _) = read(app.post("b", "{}").send().await.unwrap()).await;
    assert_eq!(status, 500);
    assert_eq!(app.post("b", "{}").send().await.unwrap().status(), 201);
    assert_eq!(upstream.executions(), 3);
}

#[tokio::test]
async fn connection_refused_is_502_and_releases() {
    let redis = RedisServer::start();
    let dead = format!("http://127.0.0.1:{}", idemgate_fleet::free_port());
    let app = TestApp::spawn(config(&redis.url(), &dead, "")).await;
    for _ in 0..2 {
        let (status, headers, body) = read(app.post("refused", "{}").send().await.unwrap()).await;
        assert_eq!(status, 502, "a retry runs again instead of 409");
        assert_eq!(problem_code(&headers, &body), "upstream_unavailable");
    }
    assert!(redis.records().await.is_empty());
}
