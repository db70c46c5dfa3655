//! A slow gRPC upstream runs once (real grpcio client and server, `tests/grpc/`): the
//! call whose upstream outlives the route's `upstream_timeout` gets
//! `DEADLINE_EXCEEDED`, the call goes on under the key's lease, a retry meanwhile finds
//! the key in flight, and a retry after the server answered gets that answer, its
//! message, trailers and `idempotency-expires` metadata, replayed.

use std::time::Duration;

use serde_json::json;

use crate::support::grpc::{calls, create, grpc_stack_with, metadata};
use crate::support::{completed_records, eventually};

#[tokio::test]
async fn a_slow_unary_call_runs_once_and_its_answer_reaches_the_retry() {
    let (redis, server, _app, target) = grpc_stack_with("", "500ms").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let call = create("slow-grpc", "sleep:1500:70 EUR");
    let out = calls(&target, json!([call, call])).await;
    let (first, during) = (&out[0], &out[1]);
    assert_eq!(first["code"], "DEADLINE_EXCEEDED", "{first}");
    let details = first["details"].as_str().unwrap();
    assert!(details.starts_with("upstream_timeout: "), "{details}");
    assert_eq!(
        during["code"], "ABORTED",
        "in flight while it runs: {during}"
    );
    // The server answers (1.5 s in) and the call that went on stores it.
    let stored = eventually(Duration::from_secs(10), async || {
        completed_records(&redis).await == 1
    });
    assert!(stored.await, "the call never stored its answer");
    let retry = &calls(&target, json!([call])).await[0];
    assert_eq!(retry["code"], "OK", "{retry}");
    assert_eq!(
        metadata(retry, "initial", "idempotent-replayed"),
        Some("true")
    );
    assert!(
        metadata(retry, "initial", "idempotency-expires").is_some(),
        "{retry}"
    );
    assert!(metadata(retry, "trailing", "x-ledger").is_some(), "{retry}");
    let message = hex::decode(retry["messages"][0].as_str().unwrap()).unwrap();
    let message = String::from_utf8(message).unwrap();
    assert!(
        message.starts_with("paid:sleep:1500:70 EUR:1:"),
        "the first (and only) execution's answer: {message}"
    );
    let again = &calls(&target, json!([call])).await[0];
    assert_eq!(again["messages"], retry["messages"]);
    assert_eq!(again["trailing"], retry["trailing"]);
    assert_eq!(
        metadata(again, "initial", "idempotency-expires"),
        metadata(retry, "initial", "idempotency-expires")
    );
    assert_eq!(server.executions(&direct, "slow-grpc").await, 1);
}
