//! One client and a keyed SSE stream (`text/event-stream`, chunked, no `Content-Length`):
//! its events reach the client as the upstream sends them, the record completes even
//! when the client leaves, retries replay the same bytes, and a stream over
//! `server.max_response_body` reaches its client whole while retries get the stored 502.
//! A retry sent the moment the client saw the end already finds the record.

use std::time::Duration;

use super::{base, gateway, post, since, sse_route, stored, End, Knobs, Streamed, KNOBS};
use crate::support::{eventually, problem_code, read, RedisServer, SseUpstream, TestApp};

/// Ten events, 200 ms apart: the stream lasts 1.8 s.
const TEN: &str = "events=10&gap_ms=200";
/// The most an event may take from the upstream to the client when it is forwarded as
/// it arrives (a buffered stream gives the first event ~1.8 s after it was sent).
const LIVE: Duration = Duration::from_millis(500);
const WITHIN: Duration = Duration::from_secs(20);

async fn setup(knobs: super::Knobs<'_>) -> (RedisServer, SseUpstream, TestApp) {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let app = gateway(&redis, &sse_route(&upstream), knobs).await;
    (redis, upstream, app)
}

/// A retry of `key` once its record is stored (the whole answer read).
async fn retry(redis: &RedisServer, app: &TestApp, key: &str, query: &str) -> Streamed {
    stored(redis).await;
    Streamed::whole(post(&app.client, &base(app), key, query), WITHIN).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_event_reaches_the_client_as_the_upstream_sends_it() {
    let (redis, upstream, app) = setup(KNOBS).await;
    let request = post(&app.client, &base(&app), "live-1", TEN);
    let mut first = Streamed::open(request, WITHIN).await;
    first.read(2, WITHIN).await;
    // Nobody waits on the key: nothing of the answer goes to Redis while it runs.
    let live: Vec<String> = (redis.keys().await.into_iter())
        .filter(|k| k.ends_with(":live"))
        .collect();
    assert_eq!(live, Vec::<String>::new(), "a live stream nobody joined");
    first.finish(WITHIN).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert_eq!(first.end, End::Clean);
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    let ran = upstream.first_of("live-1");
    assert_eq!(first.body, ran.body(), "the upstream's bytes, all of them");
    assert_eq!(first.events_at.len(), 10);
    let (sent, got) = (ran.sent[0], first.events_at[0]);
    assert!(
        got < ran.sent[9],
        "the first event arrived {:?} after the upstream sent the last one",
        since(got, ran.sent[9])
    );
    assert!(
        since(got, sent) < LIVE,
        "the first event took {:?} from the upstream to the client",
        since(got, sent)
    );
    assert!(
        since(got, first.sent) < LIVE,
        "the first event came {:?} after the request",
        since(got, first.sent)
    );
    // Each event as it was sent, not in a burst at the end.
    for (i, (&at, &out)) in first.events_at.iter().zip(&ran.sent).enumerate() {
        assert!(since(at, out) < LIVE, "event {i} took {:?}", since(at, out));
    }
    assert!(since(first.ended.unwrap(), first.sent) >= Duration::from_millis(1800));
    assert_eq!(
        first.header("content-length"),
        None,
        "a live answer cannot know its length"
    );
    assert_eq!(upstream.executions_of("live-1"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_end_replays_the_same_bytes() {
    let (redis, upstream, app) = setup(KNOBS).await;
    let request = post(&app.client, &base(&app), "live-2", TEN);
    let first = Streamed::whole(request, WITHIN).await;
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert_eq!(first.header("content-length"), None, "streamed live");
    assert!(
        since(first.events_at[0], first.sent) < Duration::from_millis(1000),
        "the first event came only after {:?}",
        since(first.events_at[0], first.sent)
    );
    let replay = retry(&redis, &app, "live-2", TEN).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body, "byte for byte");
    assert_eq!(
        replay.header("content-length"),
        Some(first.body.len().to_string().as_str()),
        "a replay knows its length"
    );
    for name in ["content-type", "cache-control", "x-stream-id"] {
        assert_eq!(replay.header(name), first.header(name), "{name}");
    }
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(replay.header("x-ratelimit-remaining"), None, "not replayed");
    assert_eq!(
        first.header("x-stream-id"),
        Some(upstream.first_of("live-2").id.as_str())
    );
    assert_eq!(upstream.executions_of("live-2"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_after_the_first_event_still_leaves_a_complete_record() {
    let (redis, upstream, app) = setup(KNOBS).await;
    let request = post(&app.client, &base(&app), "leaver", TEN);
    let mut first = Streamed::open(request, WITHIN).await;
    first.read(1, WITHIN).await;
    assert_eq!(first.status, 200);
    assert!(!first.events_at.is_empty(), "{:?}", first.end);
    let ran = upstream.first_of("leaver");
    assert!(
        since(first.events_at[0], ran.sent[0]) < LIVE,
        "the first event came {:?} after the upstream sent it",
        since(first.events_at[0], ran.sent[0])
    );
    assert!(!ran.finished, "the client left mid-stream");
    first.leave();

    // The gateway reads the upstream to the end all the same, and stores it.
    let finished = eventually(Duration::from_secs(5), async || {
        upstream.first_of("leaver").finished
    })
    .await;
    assert!(
        finished,
        "the upstream's stream was cut when the client left"
    );
    let replay = retry(&redis, &app, "leaver", TEN).await;
    assert_eq!(
        replay.status,
        200,
        "{}",
        String::from_utf8_lossy(&replay.body)
    );
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.end, End::Clean);
    assert_eq!(replay.body, ran.body(), "the whole stream, byte for byte");
    assert_eq!(replay.events_at.len(), 10);
    assert_eq!(upstream.executions_of("leaver"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_max_response_body_reaches_its_client_and_stores_a_502() {
    let knobs = Knobs {
        server: "max_response_body = \"64KiB\"\n",
        ..KNOBS
    };
    let (redis, upstream, app) = setup(knobs).await;
    // Ten events of ~10 KB: ~100 KB, over the 64 KiB limit from the seventh.
    let query = "events=10&gap_ms=100&size=10000";
    let request = post(&app.client, &base(&app), "huge", query);
    let first = Streamed::whole(request, WITHIN).await;
    let ran = upstream.first_of("huge");
    assert!(ran.body().len() > 64 * 1024);
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body[..first.body.len().min(400)])
    );
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    assert!(
        matches!(first.end, End::Aborted(_)),
        "the key stores a 502, so the first client's answer must not end cleanly: {:?}",
        first.end
    );
    assert_eq!(first.body.len(), ran.body().len(), "every byte first");
    assert!(first.body == ran.body(), "the first client got other bytes");

    let replay = retry(&redis, &app, "huge", query).await;
    let (status, headers, body) = (replay.status, &replay.headers, &replay.body);
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(body));
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(problem_code(headers, body), "upstream_response_too_large");
    // And the same again: it is what the key stores.
    let again = post(&app.client, &base(&app), "huge", query).send().await;
    let (status, headers, body) = read(again.unwrap()).await;
    assert_eq!(status, 502);
    assert_eq!(problem_code(&headers, &body), "upstream_response_too_large");
    assert_eq!(upstream.executions_of("huge"), 1);
}

/// A client that saw its stream end and retries at once gets the replay, not 409
/// (`in_flight = "reject"`, the default): the end of a live answer must not reach its
/// client before its record is stored, as a buffered answer's never did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_the_moment_the_stream_ended_replays_it() {
    let knobs = Knobs { route: "", ..KNOBS };
    let (_redis, upstream, app) = setup(knobs).await;
    for i in 0..5 {
        let key = format!("at-once-{i}");
        let query = "events=3&gap_ms=50";
        let first = Streamed::whole(post(&app.client, &base(&app), &key, query), WITHIN).await;
        assert_eq!((first.status, &first.end), (200, &End::Clean));
        assert_eq!(first.header("content-length"), None, "streamed live");
        let retry = post(&app.client, &base(&app), &key, query).send().await;
        let (status, headers, body) = read(retry.unwrap()).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(
            status, 200,
            "retry {i}, sent once the stream had ended: {text}"
        );
        assert_eq!(headers["idempotent-replayed"], "true");
        assert!(body == first.body, "retry {i}: {text}");
        assert_eq!(upstream.executions_of(&key), 1);
    }
}
