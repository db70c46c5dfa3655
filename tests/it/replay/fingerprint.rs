//! `[idempotency.fingerprint]` against real Redis (and Postgres): ignored JSON values,
//! `*` in arrays, headers that count, `body = "none"`, `query = "sorted"`.

use std::time::Duration;

use crate::support::{durable_stack, eventually, keyed_post, problem_code, read, stack, TestApp};

const IGNORE_TS: &str = "[routes.idempotency.fingerprint]\n\
                         ignore_json = [\"/client_ts\", \"/items/*/client_ts\"]\n";

/// Sends `body` with `key`: (status, `Idempotent-Replayed`, problem code if any).
async fn send(app: &TestApp, key: &str, body: &str) -> (u16, String, Option<String>) {
    answer(app.post(key, body)).await
}

async fn answer(request: reqwest::RequestBuilder) -> (u16, String, Option<String>) {
    let (status, headers, body) = read(request.send().await.unwrap()).await;
    let replayed = (headers.get("idempotent-replayed"))
        .map_or(String::new(), |v| v.to_str().unwrap().to_string());
    let code = (status >= 400).then(|| problem_code(&headers, &body));
    (status, replayed, code)
}

fn replayed() -> (u16, String, Option<String>) {
    (201, "true".into(), None)
}

fn reused() -> (u16, String, Option<String>) {
    (422, String::new(), Some("idempotency_key_reused".into()))
}

#[tokio::test]
async fn a_retry_changing_only_an_ignored_field_replays() {
    let (_redis, upstream, app) = stack(IGNORE_TS).await;
    let first = send(&app, "ts", r#"{"amount":5,"client_ts":"12:00:01"}"#).await;
    assert_eq!(first, (201, "false".into(), None));
    let retry = send(&app, "ts", r#"{"client_ts":"12:00:09","amount":5}"#).await;
    assert_eq!(retry, replayed());
    assert_eq!(send(&app, "ts", r#"{"amount":5}"#).await, replayed());
    assert_eq!(upstream.executions(), 1);
    let other = send(&app, "ts", r#"{"amount":6,"client_ts":"12:00:01"}"#).await;
    assert_eq!(other, reused());
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn without_the_policy_the_same_retry_is_a_mismatch() {
    let (_redis, upstream, app) = stack("").await;
    send(&app, "ts", r#"{"amount":5,"client_ts":"12:00:01"}"#).await;
    let retry = send(&app, "ts", r#"{"amount":5,"client_ts":"12:00:09"}"#).await;
    assert_eq!(retry, reused());
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_wildcard_reaches_every_array_element() {
    let (_redis, upstream, app) = stack(IGNORE_TS).await;
    let body = |a: u32, b: u32, qty: u32| {
        format!(
            r#"{{"items":[{{"sku":"x","qty":{qty},"client_ts":{a}}},{{"sku":"y","client_ts":{b}}}]}}"#
        )
    };
    assert_eq!(send(&app, "items", &body(1, 2, 1)).await.0, 201);
    assert_eq!(send(&app, "items", &body(7, 8, 1)).await, replayed());
    assert_eq!(send(&app, "items", &body(1, 2, 3)).await, reused());
    // Array order still counts: the elements are not a set.
    let swapped = r#"{"items":[{"sku":"y","client_ts":2},{"sku":"x","qty":1,"client_ts":1}]}"#;
    assert_eq!(send(&app, "items", swapped).await, reused());
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_named_header_with_another_value_is_a_mismatch() {
    let extra = "[routes.idempotency.fingerprint]\nheaders = [\"Stripe-Account\"]\n";
    let (_redis, upstream, app) = stack(extra).await;
    let as_account = |account: &str| app.post("acct", "{}").header("Stripe-Account", account);
    assert_eq!(answer(as_account("acct_1")).await.0, 201);
    assert_eq!(answer(as_account(" acct_1 ")).await, replayed());
    assert_eq!(answer(as_account("acct_2")).await, reused());
    assert_eq!(answer(app.post("acct", "{}")).await, reused());
    assert_eq!(upstream.executions(), 1);
    // A header not named does not count.
    let other = app.post("acct", "{}").header("Stripe-Account", "acct_1");
    assert_eq!(answer(other.header("X-Other", "1")).await, replayed());
}

#[tokio::test]
async fn with_body_none_a_retry_with_another_body_replays() {
    let extra = "[routes.idempotency.fingerprint]\nbody = \"none\"\n";
    let (_redis, upstream, app) = stack(extra).await;
    assert_eq!(send(&app, "nobody", r#"{"amount":1}"#).await.0, 201);
    assert_eq!(send(&app, "nobody", r#"{"amount":2}"#).await, replayed());
    assert_eq!(send(&app, "nobody", "not even json").await, replayed());
    // The path still counts.
    let refund = app
        .client
        .post(app.url("/v1/refunds"))
        .header("Idempotency-Key", "nobody")
        .body("{}");
    assert_eq!(answer(refund).await, reused());
    assert_eq!(upstream.executions(), 1);
}

fn query_post(app: &TestApp, key: &str, query: &str) -> reqwest::RequestBuilder {
    keyed_post(
        &app.client,
        app.url(&format!("/v1/payments?{query}")),
        key,
        "{}",
    )
}

#[tokio::test]
async fn a_sorted_query_ignores_parameter_order_and_exact_does_not() {
    let extra = "[routes.idempotency.fingerprint]\nquery = \"sorted\"\n";
    let (_redis, upstream, app) = stack(extra).await;
    assert_eq!(answer(query_post(&app, "q", "a=1&b=2")).await.0, 201);
    assert_eq!(answer(query_post(&app, "q", "b=2&a=1")).await, replayed());
    assert_eq!(answer(query_post(&app, "q", "b=3&a=1")).await, reused());
    assert_eq!(upstream.executions(), 1);

    let (_redis, upstream, app) = stack("").await;
    assert_eq!(answer(query_post(&app, "q", "a=1&b=2")).await.0, 201);
    assert_eq!(answer(query_post(&app, "q", "b=2&a=1")).await, reused());
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn an_ignored_field_replay_comes_from_postgres_once_redis_is_empty() {
    let (mut redis, pg, upstream, app) = durable_stack("claims = \"redis\"", IGNORE_TS).await;
    let first = send(&app, "pg", r#"{"amount":7,"client_ts":1}"#).await;
    assert_eq!(first.0, 201);
    assert_eq!(pg.count("state = 'completed'").await, 1);
    redis.restart();
    assert!(redis.records().await.is_empty(), "Redis restarted empty");
    let replays = eventually(Duration::from_secs(10), async || {
        send(&app, "pg", r#"{"client_ts":2,"amount":7}"#).await == replayed()
    })
    .await;
    assert!(
        replays,
        "the retry with another client_ts replays from Postgres"
    );
    assert_eq!(upstream.executions(), 1);
    redis.restart();
    let mismatch = eventually(Duration::from_secs(10), async || {
        send(&app, "pg", r#"{"amount":8,"client_ts":1}"#).await == reused()
    })
    .await;
    assert!(mismatch, "another amount is still a mismatch");
    assert_eq!(upstream.executions(), 1);
}
