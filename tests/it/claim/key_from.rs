//! `key_from = "json:/pointer"`: the idempotency key read from the JSON body (as APIs
//! such as Square's carry it), against real Redis and Postgres: it claims, replays and
//! is scoped by tenant as a header key is; the header wins when it agrees; a
//! disagreement, a key that is not a string and a missing key where one is required are
//! refused with their own problem codes, nothing forwarded; a body without a key on a
//! route that does not require one passes through unkeyed.

use crate::support::{comparable, durable_stack, problem_code, send, stack, TestApp};

const ROUTE: &str = "[idempotency]\nkey_from = \"json:/idempotency_key\"\n\
    scope_headers = [\"x-tenant-id\"]\nanonymous = \"reject\"\n";

/// A POST of `body` by `tenant`, with the key header when `header` is set.
async fn post(
    app: &TestApp,
    tenant: &str,
    header: Option<&str>,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, bytes::Bytes) {
    let mut request = (app.client.post(app.url("/v1/payments")))
        .header("x-tenant-id", tenant)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = header {
        request = request.header("idempotency-key", key);
    }
    send(request).await
}

fn without_replay_flag(h: &reqwest::header::HeaderMap) -> Vec<(String, Vec<u8>)> {
    let mut h = comparable(h);
    h.retain(|(n, _)| n != "idempotent-replayed");
    h
}

#[tokio::test]
async fn a_key_in_the_body_claims_replays_and_is_scoped_by_tenant() {
    let (_redis, upstream, app) = stack(ROUTE).await;
    let body = r#"{"amount":100,"idempotency_key":"order-42"}"#;
    let first = post(&app, "acme", None, body).await;
    assert_eq!(
        (first.0, &first.1["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    let again = post(&app, "acme", None, body).await;
    assert_eq!(again.1["idempotent-replayed"], "true");
    assert_eq!((again.0, &again.2), (first.0, &first.2));
    assert_eq!(without_replay_flag(&again.1), without_replay_flag(&first.1));
    // The header, when present and equal, is the same key.
    let with_header = post(&app, "acme", Some("order-42"), body).await;
    assert_eq!(with_header.1["idempotent-replayed"], "true");
    assert_eq!(upstream.executions(), 1);
    // Another tenant's same key is another record.
    let other = post(&app, "globex", None, body).await;
    assert_eq!(other.1["idempotent-replayed"], "false");
    assert_eq!(upstream.executions(), 2);
    // The same key with another body: the usual mismatch.
    let changed = post(
        &app,
        "acme",
        None,
        r#"{"amount":999,"idempotency_key":"order-42"}"#,
    )
    .await;
    assert_eq!(
        problem_code(&changed.1, &changed.2),
        "idempotency_key_reused"
    );

    // Refusals, nothing forwarded: header and body disagree; a key that is no string or
    // is named twice; an invalid key.
    let cases = [
        (Some("order-43"), body, "idempotency_key_conflict"),
        (
            None,
            r#"{"idempotency_key":42}"#,
            "idempotency_key_not_in_body",
        ),
        (
            None,
            r#"{"idempotency_key":"a","idempotency_key":"b"}"#,
            "idempotency_key_not_in_body",
        ),
        (
            None,
            r#"{"idempotency_key":"has space"}"#,
            "idempotency_key_invalid",
        ),
    ];
    for (header, body, code) in cases {
        let r = post(&app, "acme", header, body).await;
        assert_eq!(
            (r.0, problem_code(&r.1, &r.2).as_str()),
            (400, code),
            "{body}"
        );
    }
    assert_eq!(upstream.executions(), 2);

    // No key on a route that does not require one: forwarded unkeyed, every time.
    for _ in 0..2 {
        let r = post(&app, "acme", None, r#"{"amount":5}"#).await;
        assert_eq!(r.0, 201);
        assert!(r.1.get("idempotent-replayed").is_none());
    }
    assert_eq!(upstream.executions(), 4);
}

#[tokio::test]
async fn a_required_body_key_is_refused_when_missing_and_replays_from_postgres() {
    let extra = format!("{ROUTE}required = true\n");
    let (redis, _pg, upstream, app) = durable_stack("", &extra).await;
    let missing = post(&app, "acme", None, r#"{"amount":5}"#).await;
    assert_eq!(missing.0, 400);
    assert_eq!(
        problem_code(&missing.1, &missing.2),
        "idempotency_key_not_in_body"
    );
    assert_eq!(upstream.executions(), 0);

    let body = r#"{"amount":7,"idempotency_key":"order-7"}"#;
    let first = post(&app, "acme", None, body).await;
    assert_eq!(first.0, 201);
    // Redis forgets; the record written through to Postgres answers.
    redis.cli(&["FLUSHALL"]);
    let again = post(&app, "acme", None, body).await;
    assert_eq!(again.1["idempotent-replayed"], "true", "{:?}", again.2);
    assert_eq!(again.2, first.2);
    assert_eq!(upstream.executions(), 1);
}
