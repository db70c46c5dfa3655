//! Requests at the edge: how the key is read (its forms, the alias header, required or
//! not), invalid keys, bodies over the limit, methods that take no key, unmatched paths.

use crate::support::{problem_code, read, stack};

#[tokio::test]
async fn invalid_keys_are_400_and_never_forwarded() {
    let (_redis, upstream, app) = stack("[idempotency]\nmax_key_length = 10\n").await;
    let too_long = "k".repeat(11);
    for bad in [
        "\"unterminated",
        "a b",
        "\"bad\\escape\"",
        "\"\"",
        too_long.as_str(),
    ] {
        let (status, headers, body) = read(app.post(bad, "{}").send().await.unwrap()).await;
        assert_eq!(status, 400, "key {bad:?}");
        assert_eq!(
            problem_code(&headers, &body),
            "idempotency_key_invalid",
            "key {bad:?}"
        );
    }
    // Empty and non-ASCII values need raw header bytes.
    for raw in [&b""[..], "caf\u{e9}".as_bytes()] {
        let value = reqwest::header::HeaderValue::from_bytes(raw).unwrap();
        let r = app
            .client
            .post(app.url("/v1/payments"))
            .header("Idempotency-Key", value)
            .send()
            .await
            .unwrap();
        let (status, headers, body) = read(r).await;
        assert_eq!(status, 400);
        assert_eq!(problem_code(&headers, &body), "idempotency_key_invalid");
    }
    assert_eq!(upstream.executions(), 0);
}

#[tokio::test]
async fn sf_string_and_bare_token_are_the_same_key() {
    let (_redis, upstream, app) = stack("").await;
    let (first, _, _) = read(app.post("same-key", "{}").send().await.unwrap()).await;
    let r = app.post("\"same-key\"", "{}").send().await.unwrap();
    assert_eq!(first, 201);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn alias_header_is_read() {
    let (_redis, upstream, app) = stack("").await;
    for _ in 0..2 {
        app.client
            .post(app.url("/v1/payments"))
            .header("X-Idempotency-Key", "via-alias")
            .body("x")
            .send()
            .await
            .unwrap();
    }
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn missing_key_is_400_when_required_else_proxied_plainly() {
    let (_redis, upstream, app) = stack("[idempotency]\nrequired = true\n").await;
    let (status, headers, body) = read(
        app.client
            .post(app.url("/v1/payments"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(problem_code(&headers, &body), "idempotency_key_missing");
    assert_eq!(upstream.executions(), 0);

    let (_redis, upstream, app) = stack("").await;
    for _ in 0..2 {
        let r = app
            .client
            .post(app.url("/v1/payments"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        assert!(r.headers().get("idempotent-replayed").is_none());
    }
    assert_eq!(
        upstream.executions(),
        2,
        "without a key nothing is deduplicated"
    );
}

#[tokio::test]
async fn oversized_body_is_413_and_claims_nothing() {
    let (redis, upstream, app) = stack("[server]\nmax_request_body = \"1KiB\"\n").await;
    let big = "x".repeat(1025);
    let (status, headers, body) = read(app.post("big", &big).send().await.unwrap()).await;
    assert_eq!(status, 413);
    assert_eq!(problem_code(&headers, &body), "request_body_too_large");
    // Chunked (no Content-Length) is bounded where it is read, too.
    let stream =
        futures_util::stream::iter((0..3).map(|_| Ok::<_, std::io::Error>("y".repeat(512))));
    let r = app
        .client
        .post(app.url("/v1/payments"))
        .header("Idempotency-Key", "big")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(upstream.executions(), 0);
    assert!(redis.records().await.is_empty(), "nothing may be claimed");
    // The key is still free.
    assert_eq!(app.post("big", "{}").send().await.unwrap().status(), 201);
}

#[tokio::test]
async fn unlisted_methods_never_touch_redis() {
    let (mut redis, upstream, app) = stack("").await;
    redis.stop();
    for _ in 0..2 {
        let r = app
            .client
            .get(app.url("/v1/payments/1"))
            .header("Idempotency-Key", "ignored-for-get")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "GET proxied while Redis is down");
        assert!(r.headers().get("idempotent-replayed").is_none());
        assert!(
            r.headers().get("x-hop").is_none(),
            "hop-by-hop stripped on pass-through"
        );
    }
    assert_eq!(upstream.executions(), 2);
    // A keyed POST, by contrast, needs Redis.
    assert_eq!(app.post("k", "{}").send().await.unwrap().status(), 503);
}

#[tokio::test]
async fn unmatched_path_is_404_problem() {
    let (_redis, upstream, app) = stack("").await;
    let (status, headers, body) =
        read(app.client.post(app.url("/v2/x")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert_eq!(problem_code(&headers, &body), "route_not_found");
    assert_eq!(upstream.executions(), 0);
}
