//! The replica running a keyed stream is SIGKILLed mid-stream (an `idemgate serve`
//! process, `lock_ttl = "2s"`): a duplicate that joined the stream on another replica
//! gets an aborted body (an error while reading it, never a clean end that would pass
//! a cut stream off as whole) within `lock_ttl` + a few seconds; the killed replica
//! stored nothing, so once its lease ran out the key is free: a retry runs the
//! upstream again (twice in all, no more) and completes. The same for a gRPC
//! server-streaming call, whose joiner ends `UNAVAILABLE` (`live_answer_cut`).

use std::time::{Duration, Instant};

use serde_json::json;

use super::grpc::{self, grpc_route};
use super::{base, gateway, gateway_process, post, since, sse_route, End, Knobs, Streamed, KNOBS};
use crate::support::grpc::{calls, metadata, GrpcServer};
use crate::support::{eventually, until_subscribed, RedisServer, SseUpstream};

const LOCK_TTL: Duration = Duration::from_secs(2);
/// A lease of 2 s needs a Redis command timeout of at most a third of it.
const SHORT_LEASE: Knobs = Knobs {
    route: "in_flight = \"wait\"\nwait_timeout = \"30s\"\nlock_ttl = \"2s\"\n",
    command_timeout: "600ms",
    ..KNOBS
};
const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_of_a_killed_replicas_stream_is_aborted_and_the_key_freed() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let route = sse_route(&upstream);
    let dir = tempfile::tempdir().unwrap();
    let mut doomed = gateway_process(dir.path(), "doomed", &redis, &route, SHORT_LEASE).await;
    let survivor = gateway(&redis, &route, SHORT_LEASE).await;
    until_subscribed(&redis, 2).await;
    let http = reqwest::Client::new();
    // Fifteen events 200 ms apart: 2.8 s, cut after about 1 s.
    let query = "events=15&gap_ms=200";

    let mut first = Streamed::open(post(&http, &doomed.url(), "cut", query), WITHIN).await;
    first.read(3, WITHIN).await;
    assert_eq!(first.status, 200, "{}", doomed.log_text());
    assert!(
        first.events_at.len() >= 3 && first.end == End::Open,
        "the first client is mid-stream: {} events, {:?}",
        first.events_at.len(),
        first.end
    );
    let sent = upstream.first_of("cut").sent[0];
    assert!(
        since(first.events_at[0], sent) < Duration::from_millis(500),
        "the first event reached the first client {:?} after the upstream sent it",
        since(first.events_at[0], sent)
    );
    let mut joiner = Streamed::open(post(&http, &base(&survivor), "cut", query), WITHIN).await;
    assert_eq!(joiner.status, 200);
    assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
    joiner.read(3, Duration::from_secs(2)).await;
    assert!(
        joiner.events_at.len() >= 3,
        "the joiner got the recorded events at once: {} events, {:?}",
        joiner.events_at.len(),
        joiner.end
    );
    assert_eq!(joiner.end, End::Open, "the joiner is mid-stream");
    assert!(!upstream.first_of("cut").finished, "the stream still runs");

    doomed.kill();
    let killed = Instant::now();
    joiner.finish(LOCK_TTL + Duration::from_secs(10)).await;
    let aborted = since(joiner.ended.unwrap(), killed);
    assert!(
        matches!(joiner.end, End::Aborted(_)),
        "the joiner's body ended {:?}, {aborted:?} after the kill; the killed replica's log:\n{}",
        joiner.end,
        doomed.log_text()
    );
    assert!(
        aborted < LOCK_TTL + Duration::from_secs(3),
        "the joiner's body was aborted only {aborted:?} after the kill"
    );
    let ran = upstream.first_of("cut");
    assert!(
        ran.body().starts_with(&joiner.body),
        "the joiner got bytes of another stream"
    );
    assert!(joiner.body.len() < ran.body().len());

    // The killed replica stored nothing: after its lease the key is free.
    tokio::time::sleep_until((killed + LOCK_TTL + Duration::from_millis(200)).into()).await;
    let retry = Streamed::whole(post(&http, &base(&survivor), "cut", query), WITHIN).await;
    let body = String::from_utf8_lossy(&retry.body);
    assert_eq!(retry.status, 200, "{body}");
    assert_eq!(
        retry.header("idempotent-replayed"),
        Some("false"),
        "ran again"
    );
    assert_eq!(retry.end, End::Clean);
    let runs = upstream.of("cut");
    assert_eq!(runs.len(), 2, "the retry ran the upstream once more");
    assert!(
        retry.body == runs[1].body(),
        "the second execution's stream"
    );
    assert!(
        !runs[0].finished,
        "the first stream was cut with its replica"
    );
    // And it is what the key now keeps.
    let replay = Streamed::whole(post(&http, &base(&survivor), "cut", query), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == retry.body);
    assert_eq!(upstream.executions_of("cut"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_joiner_of_a_killed_replicas_call_ends_unavailable_and_the_key_is_freed() {
    let redis = RedisServer::start();
    let server = GrpcServer::start();
    let direct = format!("127.0.0.1:{}", server.port);
    let route = grpc_route(&server);
    let dir = tempfile::tempdir().unwrap();
    let mut doomed = gateway_process(dir.path(), "doomed", &redis, &route, SHORT_LEASE).await;
    let survivor = gateway(&redis, &route, SHORT_LEASE).await;
    until_subscribed(&redis, 2).await;
    let (to_doomed, to_survivor) = (
        format!("127.0.0.1:{}", doomed.port),
        survivor.addr.to_string(),
    );
    // Thirty messages 200 ms apart (5.8 s); the duplicate 500 ms after the first call.
    let feed = |target: &str, delay_ms| grpc::feed("feed-cut", 30, 200, target, delay_ms);
    let plan = json!([{"kind": "group", "calls": [feed(&to_doomed, 0), feed(&to_survivor, 500)]}]);
    let target = to_doomed.clone();
    let client = tokio::spawn(async move { calls(&target, plan).await });
    let running = eventually(Duration::from_secs(10), async || {
        server.executions(&direct, "feed-cut").await == 1
    })
    .await;
    assert!(running, "the call never reached the server");
    // Real time: the plan sends the duplicate 500 ms in; the kill falls after it joined,
    // mid-call.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    doomed.kill();
    let killed = Instant::now();
    let out = client.await.unwrap();
    let ended = since(Instant::now(), killed);
    let joiner = &out[0][1];
    let log = doomed.log_text();
    assert_eq!(
        joiner["code"], "UNAVAILABLE",
        "{joiner}\nthe killed replica's log:\n{log}"
    );
    let details = joiner["details"].as_str().unwrap();
    assert!(details.starts_with("live_answer_cut"), "{details}");
    assert_eq!(
        metadata(joiner, "initial", "idempotent-replayed"),
        Some("true"),
        "it had joined the call: {joiner}"
    );
    let got = grpc::texts(joiner);
    assert!((1..30).contains(&got.len()), "{} messages", got.len());
    let id = got[0].split(':').nth(2).unwrap();
    for (i, m) in got.iter().enumerate() {
        assert!(
            m.starts_with(&format!("live:{i}:{id}:")),
            "message {i}: {m}"
        );
    }
    assert!(
        ended < LOCK_TTL + Duration::from_secs(3),
        "the joiner's call ended only {ended:?} after the kill"
    );

    tokio::time::sleep_until((killed + LOCK_TTL + Duration::from_millis(200)).into()).await;
    let retry = &calls(&to_survivor, json!([feed(&to_survivor, 0)])).await[0];
    assert_eq!(retry["code"], "OK", "{retry}");
    assert_eq!(
        metadata(retry, "initial", "idempotent-replayed"),
        Some("false")
    );
    let again = grpc::texts(retry);
    assert_eq!(again.len(), 30);
    assert!(!again[0].contains(id), "a new execution");
    assert_eq!(server.executions(&direct, "feed-cut").await, 2);
}
