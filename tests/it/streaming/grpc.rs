//! A keyed gRPC server-streaming call (`Feed` of the grpcio server in `tests/grpc/`,
//! over h2c, with a real grpcio client) streams live through the gateway: its first
//! message reaches the client long before the server sends its last; a retry replays
//! the same messages and trailers; a duplicate on another replica joins the running
//! call and gets the same messages, status and trailers; the server ran it once.
//! The server stamps each message with when it sent it and the client notes when each
//! arrived, on one clock (CLOCK_MONOTONIC), so "live" is measured, not guessed.

use serde_json::{json, Value};

use super::{replicas, KNOBS};
use crate::support::grpc::{calls, metadata, GrpcServer};
use crate::support::RedisServer;

/// Eight messages 300 ms apart: the call lasts 2.1 s.
const GAP_MS: u64 = 300;
const MESSAGES: usize = 8;
/// The most a message may take from the server to the client when forwarded as it
/// arrives, in ms.
const LIVE_MS: f64 = 500.0;

/// The gRPC route (`/demo.Payments/` to `server` over h2c, keys required, scoped by
/// `x-tenant-id`), its `[routes.idempotency]` table open.
pub(super) fn grpc_route(server: &GrpcServer) -> String {
    format!(
        "[[routes]]\nname = \"grpc\"\npath_prefix = \"/demo.Payments/\"\n\
         upstream = \"http://127.0.0.1:{}\"\nupstream_protocol = \"h2c\"\n\
         upstream_timeout = \"30s\"\n\
         [routes.idempotency]\nanonymous = \"reject\"\nscope_headers = [\"x-tenant-id\"]\n\
         required = true\n",
        server.port
    )
}

/// A keyed `Feed` call of `messages` messages `gap_ms` apart, to `target` after
/// `delay_ms` (in a group).
pub(super) fn feed(key: &str, messages: usize, gap_ms: u64, target: &str, delay_ms: u64) -> Value {
    feed_of("live", key, messages, gap_ms, target, delay_ms)
}

/// [`feed`] with messages of `text` (`fail...`: the call ends FAILED_PRECONDITION).
fn feed_of(text: &str, key: &str, n: usize, gap_ms: u64, target: &str, delay_ms: u64) -> Value {
    json!({"method": "/demo.Payments/Feed", "kind": "server_stream",
        "message": format!("every:{gap_ms}:{n}:{text}"), "key": key, "tenant": "t1",
        "target": target, "delay_ms": delay_ms})
}

/// The messages of a result, as text.
pub(super) fn texts(result: &Value) -> Vec<String> {
    (result["messages"].as_array().unwrap().iter())
        .map(|m| String::from_utf8(hex::decode(m.as_str().unwrap()).unwrap()).unwrap())
        .collect()
}

/// When the server sent each message of a result (ms, its clock).
pub(super) fn sent_ms(result: &Value) -> Vec<f64> {
    (texts(result).iter())
        .map(|t| t.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

/// When each message of a result arrived (ms, the same clock).
pub(super) fn at_ms(result: &Value) -> Vec<f64> {
    (result["at_ms"].as_array().unwrap().iter())
        .map(|t| t.as_f64().unwrap())
        .collect()
}

/// Trailing metadata without what differs per exchange.
fn trailers(result: &Value) -> Vec<Value> {
    let per_exchange = ["idempotent-replayed", "x-request-id", "date"];
    (result["trailing"].as_array().unwrap().iter())
        .filter(|kv| !per_exchange.contains(&kv[0].as_str().unwrap()))
        .cloned()
        .collect()
}

/// Asserts that `other` got what `first` got as a replay: status, messages, trailers.
fn same_call(other: &Value, first: &Value, who: &str) {
    assert_eq!(other["code"], first["code"], "{who}: {other}");
    assert_eq!(other["details"], first["details"], "{who}");
    assert_eq!(
        other["messages"], first["messages"],
        "{who}: other messages"
    );
    assert_eq!(trailers(other), trailers(first), "{who}: other trailers");
    assert_eq!(
        metadata(other, "initial", "idempotent-replayed"),
        Some("true"),
        "{who}: {other}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_server_stream_is_live_replayed_and_joined_on_another_replica() {
    let redis = RedisServer::start();
    let server = GrpcServer::start();
    let direct = format!("127.0.0.1:{}", server.port);
    let (a, b) = replicas(&redis, &grpc_route(&server), KNOBS).await;
    let (one, two) = (a.addr.to_string(), b.addr.to_string());
    // The first call on one replica; 1 s later (four messages sent) a duplicate on the
    // other; once both ended, a retry.
    let plan = json!([
        {"kind": "group", "calls": [
            feed("feed-live", MESSAGES, GAP_MS, &one, 0),
            feed("feed-live", MESSAGES, GAP_MS, &two, 1000),
        ]},
        feed("feed-live", MESSAGES, GAP_MS, &one, 0),
    ]);
    let out = calls(&one, plan).await;
    let (first, joiner, retry) = (&out[0][0], &out[0][1], &out[1]);

    assert_eq!(first["code"], "OK", "{first}");
    assert_eq!(
        metadata(first, "initial", "idempotent-replayed"),
        Some("false")
    );
    let (sent, at) = (sent_ms(first), at_ms(first));
    assert_eq!(sent.len(), MESSAGES, "{first}");
    let id = texts(first)[0].split(':').nth(2).unwrap().to_string();
    assert!(
        texts(first).iter().all(|t| t.contains(&id)),
        "one execution"
    );
    assert_eq!(metadata(first, "trailing", "x-feed-id"), Some(id.as_str()));
    assert_eq!(metadata(first, "trailing", "x-fed"), Some("8"));
    let last = sent[MESSAGES - 1];
    assert!(
        at[0] + 1000.0 < last,
        "the first message arrived {:.0} ms after the server sent its last",
        at[0] - last
    );
    for (i, (a, s)) in at.iter().zip(&sent).enumerate() {
        assert!(a - s < LIVE_MS, "message {i} took {:.0} ms", a - s);
    }

    // The joiner: the messages sent before it came at once, the rest as they were sent.
    same_call(joiner, first, "joiner");
    let (joined, at) = (joiner["started_ms"].as_f64().unwrap(), at_ms(joiner));
    let recorded = sent.iter().filter(|&&s| s <= joined).count();
    assert!(
        (1..MESSAGES - 1).contains(&recorded),
        "the joiner came while the call ran: {recorded} messages sent before it"
    );
    assert!(
        at[recorded - 1] - joined < LIVE_MS,
        "the {recorded} messages sent before the joiner came reached it {:.0} ms after",
        at[recorded - 1] - joined
    );
    for i in recorded..MESSAGES {
        let late = at[i] - sent[i];
        assert!(
            late < LIVE_MS,
            "message {i} reached the joiner {late:.0} ms late"
        );
    }

    same_call(retry, first, "retry");
    assert_eq!(
        metadata(retry, "trailing", "x-feed-receipt-bin"),
        metadata(first, "trailing", "x-feed-receipt-bin"),
        "the binary trailer too"
    );
    assert_eq!(server.executions(&direct, "feed-live").await, 1);
    drop((a, b));
}

/// A stream that ends in an error status (not a release one) is stored with it: the
/// first client gets its messages live and then FAILED_PRECONDITION with the custom
/// trailers; a joiner on the other replica and a retry get the same messages, status,
/// details and trailers; the server ran it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_in_an_error_status_is_joined_and_replayed_with_it() {
    let redis = RedisServer::start();
    let server = GrpcServer::start();
    let direct = format!("127.0.0.1:{}", server.port);
    let (a, b) = replicas(&redis, &grpc_route(&server), KNOBS).await;
    let (one, two) = (a.addr.to_string(), b.addr.to_string());
    let call = |target: &str, delay_ms| feed_of("fail", "feed-fail", 6, GAP_MS, target, delay_ms);
    let plan = json!([
        {"kind": "group", "calls": [call(&one, 0), call(&two, 700)]},
        call(&two, 0),
    ]);
    let out = calls(&one, plan).await;
    let (first, joiner, retry) = (&out[0][0], &out[0][1], &out[1]);

    assert_eq!(first["code"], "FAILED_PRECONDITION", "{first}");
    assert_eq!(first["details"], "feed failed");
    assert_eq!(
        metadata(first, "initial", "idempotent-replayed"),
        Some("false")
    );
    assert_eq!(metadata(first, "trailing", "x-fed"), Some("6"));
    let (sent, at) = (sent_ms(first), at_ms(first));
    assert_eq!(sent.len(), 6, "{first}");
    assert!(
        at[0] + 1000.0 < sent[5],
        "the first message arrived {:.0} ms after the server sent its last",
        at[0] - sent[5]
    );
    let id = texts(first)[0].split(':').nth(2).unwrap().to_string();
    assert_eq!(metadata(first, "trailing", "x-feed-id"), Some(id.as_str()));

    same_call(joiner, first, "joiner");
    same_call(retry, first, "retry");
    let joined = joiner["started_ms"].as_f64().unwrap();
    assert!(
        at_ms(joiner)[0] < sent[5],
        "the joiner (came {:.0} ms before the end) got its first message only after it",
        sent[5] - joined
    );
    assert_eq!(server.executions(&direct, "feed-fail").await, 1);
    drop((a, b));
}
