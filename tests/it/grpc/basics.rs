//! gRPC through the gateway with a real gRPC client and server (grpcio, from
//! `tests/grpc/`: `client.py` runs a plan of calls, `server.py` counts executions per
//! key), over h2c on both sides: unary calls keyed by their `idempotency-key`
//! metadata run once and replay with the same message and trailers; the gateway's own
//! answers are gRPC statuses; release statuses free the key; streaming calls pass
//! through unkeyed, and keyed ones are buffered or refused with a clear status.

use serde_json::{json, Value};

use crate::support::grpc::{calls, create, grpc_stack_with, metadata, GrpcServer};
use crate::support::{RedisServer, TestApp};

/// Redis, the gRPC server, and a gateway with a `grpc` route (h2c upstream, keys
/// required, scoped by `x-tenant-id`) plus `extra` TOML for that route.
async fn grpc_stack(extra: &str) -> (RedisServer, GrpcServer, TestApp, String) {
    grpc_stack_with(extra, "5s").await
}

/// Metadata without what differs per exchange.
fn stored(metadata: &Value) -> Vec<Value> {
    let per_exchange = ["idempotent-replayed", "x-request-id", "date"];
    (metadata.as_array().unwrap().iter())
        .filter(|kv| !per_exchange.contains(&kv[0].as_str().unwrap()))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_unary_call_runs_once_and_its_retry_gets_the_same_message_and_trailers() {
    let (_redis, server, _app, target) = grpc_stack("").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let out = calls(
        &target,
        json!([create("pay-1", "100 EUR"), create("pay-1", "100 EUR")]),
    )
    .await;
    let (first, retry) = (&out[0], &out[1]);
    assert_eq!(first["code"], "OK", "{first}");
    assert_eq!(retry["code"], "OK", "{retry}");
    assert_eq!(
        first["messages"], retry["messages"],
        "the replay is the first message"
    );
    assert_eq!(
        first["trailing"], retry["trailing"],
        "the same trailers, binary ones too"
    );
    assert!(
        metadata(first, "trailing", "x-receipt-bin").is_some(),
        "{first}"
    );
    assert_eq!(
        metadata(first, "initial", "idempotent-replayed"),
        Some("false")
    );
    assert_eq!(
        metadata(retry, "initial", "idempotent-replayed"),
        Some("true")
    );
    assert_eq!(metadata(retry, "initial", "x-first"), Some("1"));
    assert_eq!(server.executions(&direct, "pay-1").await, 1);

    // The same key with another message: refused, nothing forwarded.
    let other = &calls(&target, json!([create("pay-1", "999 EUR")])).await[0];
    assert_eq!(other["code"], "FAILED_PRECONDITION", "{other}");
    let details = other["details"].as_str().unwrap();
    assert!(details.starts_with("idempotency_key_reused: "), "{details}");
    // Another tenant's same key is another key: it runs, and gets nothing of tenant 1's.
    let mut elsewhere = create("pay-1", "100 EUR");
    elsewhere["tenant"] = json!("t2");
    let elsewhere = &calls(&target, json!([elsewhere])).await[0];
    assert_eq!(
        metadata(elsewhere, "initial", "idempotent-replayed"),
        Some("false")
    );
    assert_ne!(elsewhere["messages"], first["messages"]);
    assert_eq!(server.executions(&direct, "pay-1").await, 2);
}

#[tokio::test]
async fn concurrent_duplicates_do_not_run_twice_and_the_gateway_answers_with_grpc_statuses() {
    let (_redis, server, _app, target) = grpc_stack("").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let mut burst = create("pay-2", "sleep:700:50 EUR");
    burst["parallel"] = json!(8);
    let out = calls(&target, json!([burst, create("pay-2", "sleep:700:50 EUR")])).await;
    let burst = out[0].as_array().unwrap();
    let ok = burst.iter().filter(|r| r["code"] == "OK").count();
    let aborted: Vec<&Value> = burst.iter().filter(|r| r["code"] == "ABORTED").collect();
    assert_eq!((ok, aborted.len()), (1, 7), "{burst:?}");
    let details = aborted[0]["details"].as_str().unwrap();
    assert!(
        details.starts_with("idempotency_key_in_flight: "),
        "{details}"
    );
    assert!(
        metadata(aborted[0], "trailing", "grpc-retry-pushback-ms").is_some()
            || metadata(aborted[0], "initial", "grpc-retry-pushback-ms").is_some(),
        "{:?}",
        aborted[0]
    );
    let first = burst.iter().find(|r| r["code"] == "OK").unwrap();
    assert_eq!(
        out[1]["messages"], first["messages"],
        "the retry after it replays"
    );
    assert_eq!(server.executions(&direct, "pay-2").await, 1);

    // No key where one is required, no tenant: INVALID_ARGUMENT, nothing forwarded.
    let mut keyless = create("x", "1 EUR");
    keyless["key"] = Value::Null;
    let mut tenantless = create("pay-3", "1 EUR");
    tenantless["tenant"] = Value::Null;
    let out = calls(&target, json!([keyless, tenantless])).await;
    for (r, code) in out
        .iter()
        .zip(["idempotency_key_missing", "idempotency_scope_missing"])
    {
        assert_eq!(r["code"], "INVALID_ARGUMENT", "{r}");
        assert!(r["details"].as_str().unwrap().starts_with(code), "{r}");
    }
    assert_eq!(server.executions(&direct, "pay-3").await, 0);
}

#[tokio::test]
async fn unavailable_releases_the_key_and_other_failures_are_stored_with_their_trailers() {
    let (_redis, server, _app, target) = grpc_stack("").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let out = calls(
        &target,
        json!([
            create("pay-4", "unavailable"),
            create("pay-4", "unavailable")
        ]),
    )
    .await;
    for r in &out {
        assert_eq!(
            (r["code"].as_str(), r["details"].as_str()),
            (Some("UNAVAILABLE"), Some("try again later"))
        );
    }
    assert_eq!(
        server.executions(&direct, "pay-4").await,
        2,
        "released: the retry ran again"
    );

    let out = calls(
        &target,
        json!([create("pay-5", "declined"), create("pay-5", "declined")]),
    )
    .await;
    assert_eq!(out[0]["code"], "FAILED_PRECONDITION");
    assert_eq!(out[0]["details"], "card declined");
    assert_eq!(
        metadata(&out[0], "trailing", "x-decline-reason"),
        Some("insufficient-funds")
    );
    assert_eq!(out[1]["code"], out[0]["code"]);
    assert_eq!(out[1]["details"], out[0]["details"]);
    // A trailers-only answer: its headers are the call's trailing metadata, the
    // per-exchange ones (request id, date, the replay flag) included.
    assert_eq!(stored(&out[1]["trailing"]), stored(&out[0]["trailing"]));
    assert_eq!(
        metadata(&out[1], "trailing", "idempotent-replayed"),
        Some("true")
    );
    assert_eq!(
        server.executions(&direct, "pay-5").await,
        1,
        "stored, not run again"
    );
}

#[tokio::test]
async fn a_store_that_is_down_answers_unavailable_and_forwards_nothing() {
    let (redis, server, _app, target) = grpc_stack("on_redis_unavailable = \"reject\"\n").await;
    let direct = format!("127.0.0.1:{}", server.port);
    drop(redis);
    let r = &calls(&target, json!([create("pay-6", "1 EUR")])).await[0];
    assert_eq!(r["code"], "UNAVAILABLE", "{r}");
    assert!(
        r["details"]
            .as_str()
            .unwrap()
            .starts_with("store_unavailable: "),
        "{r}"
    );
    assert_eq!(server.executions(&direct, "pay-6").await, 0);
}

#[tokio::test]
async fn streaming_calls_pass_through_unkeyed_and_keyed_ones_are_buffered_or_refused() {
    let (_redis, server, _app, target) = grpc_stack("required = false\n").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let feed = |key: Value| {
        json!({"method": "/demo.Payments/Feed", "kind": "server_stream",
        "message": "f", "key": key, "tenant": "t1"})
    };
    let chat = |key: Value| {
        json!({"method": "/demo.Payments/Chat", "kind": "bidi",
        "messages": ["a", "b", "c"], "key": key, "tenant": "t1"})
    };
    let out = calls(&target, json!([feed(Value::Null), chat(Value::Null)])).await;
    assert_eq!(out[0]["code"], "OK", "{}", out[0]);
    assert_eq!(out[0]["messages"].as_array().unwrap().len(), 3);
    assert_eq!(metadata(&out[0], "trailing", "x-fed"), Some("3"));
    // Each message sent only after the last was answered: no buffering on the way.
    assert_eq!(out[1]["code"], "OK", "{}", out[1]);
    assert_eq!(
        out[1]["messages"],
        json!([
            hex::encode("echo:a"),
            hex::encode("echo:b"),
            hex::encode("echo:c")
        ])
    );

    // Keyed server streaming: buffered whole, replayed whole with its trailers.
    let out = calls(
        &target,
        json!([feed(json!("feed-1")), feed(json!("feed-1"))]),
    )
    .await;
    assert_eq!(out[0]["messages"], out[1]["messages"]);
    assert_eq!(out[1]["trailing"], out[0]["trailing"]);
    assert_eq!(
        metadata(&out[1], "initial", "idempotent-replayed"),
        Some("true")
    );
    // Keyed bidirectional call that waits for answers: its request stream never ends,
    // so it is refused once `body_read_timeout` passes, and nothing was forwarded.
    let r = &calls(&target, json!([chat(json!("chat-1"))])).await[0];
    assert_eq!(r["code"], "DEADLINE_EXCEEDED", "{r}");
    assert!(
        r["details"]
            .as_str()
            .unwrap()
            .starts_with("request_body_timeout: "),
        "{r}"
    );
    assert_eq!(server.executions(&direct, "chat-1").await, 0);
}

#[tokio::test]
async fn with_in_flight_wait_concurrent_duplicates_get_the_first_answer() {
    let (_redis, server, _app, target) = grpc_stack("in_flight = \"wait\"\n").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let mut burst = create("pay-7", "sleep:500:70 EUR");
    burst["parallel"] = json!(6);
    let out = calls(&target, json!([burst])).await;
    let burst = out[0].as_array().unwrap();
    assert!(burst.iter().all(|r| r["code"] == "OK"), "{burst:?}");
    assert!(
        burst.iter().all(|r| r["messages"] == burst[0]["messages"]),
        "{burst:?}"
    );
    assert!(
        burst.iter().all(|r| r["trailing"] == burst[0]["trailing"]),
        "{burst:?}"
    );
    let replayed = (burst.iter())
        .filter(|r| metadata(r, "initial", "idempotent-replayed") == Some("true"))
        .count();
    assert_eq!(replayed, 5, "{burst:?}");
    assert_eq!(server.executions(&direct, "pay-7").await, 1);
}
