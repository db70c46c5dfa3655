//! Which keyed answers stream live (docs/http.md, "Streaming"): an event stream, even
//! with a `Content-Length`, and any answer without one, whatever its type; not another
//! answer with a `Content-Length`, not one whose status releases the key, and none on a
//! route with `streaming = "buffer"`: those are buffered as before (the first client
//! gets the body whole, with its length, once the upstream has sent all of it). Live
//! or buffered is read off the clock: the first event reaching the client before or
//! after the upstream sent its last one.

use std::time::Duration;

use super::{base, gateway, post, since, sse_route, stored, End, Knobs, Streamed, KNOBS};
use crate::support::sse_upstream::Execution;
use crate::support::{RedisServer, SseUpstream, TestApp};

const LIVE: Duration = Duration::from_millis(500);
const WITHIN: Duration = Duration::from_secs(20);

async fn setup(knobs: Knobs<'_>) -> (RedisServer, SseUpstream, TestApp) {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let app = gateway(&redis, &sse_route(&upstream), knobs).await;
    (redis, upstream, app)
}

/// Asserts that `first` got the whole of `ran` only once the upstream had sent it all,
/// with its length: buffered.
fn buffered(first: &Streamed, ran: &Execution) {
    assert_eq!(first.end, End::Clean);
    assert!(first.body == ran.body());
    let last = *ran.sent.last().unwrap();
    assert!(
        first.events_at[0] >= last,
        "the first event came {:?} before the upstream sent its last: streamed",
        since(last, first.events_at[0])
    );
    let length = first.body.len().to_string();
    assert_eq!(first.header("content-length"), Some(length.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_answer_of_any_type_streams_live() {
    let (redis, upstream, app) = setup(KNOBS).await;
    let query = "events=10&gap_ms=200&type=ndjson";
    let first = Streamed::whole(post(&app.client, &base(&app), "ndjson", query), WITHIN).await;
    let ran = upstream.first_of("ndjson");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert_eq!(first.header("content-type"), Some("application/x-ndjson"));
    assert!(first.body == ran.body());
    let late = since(first.events_at[0], ran.sent[0]);
    assert!(late < LIVE, "the first piece took {late:?}");
    assert!(
        first.events_at[0] < ran.sent[9],
        "not before the last was sent"
    );
    assert_eq!(first.header("content-length"), None);

    stored(&redis).await;
    let replay = Streamed::whole(post(&app.client, &base(&app), "ndjson", query), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == first.body);
    assert_eq!(upstream.executions_of("ndjson"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_streams_live_even_with_a_content_length() {
    let (_redis, upstream, app) = setup(KNOBS).await;
    let query = "events=6&gap_ms=200&length=1";
    let first = Streamed::whole(post(&app.client, &base(&app), "sse-sized", query), WITHIN).await;
    let ran = upstream.first_of("sse-sized");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.body == ran.body());
    let late = since(first.events_at[0], ran.sent[0]);
    assert!(late < LIVE, "the first event took {late:?}");
    assert!(
        first.events_at[0] < ran.sent[5],
        "not before the last was sent"
    );
    assert_eq!(upstream.executions_of("sse-sized"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_a_content_length_is_buffered() {
    let (redis, upstream, app) = setup(KNOBS).await;
    // Sent piece by piece as before, but announced with its length (and not as an
    // event stream, which streams whatever its length).
    let query = "events=6&gap_ms=200&type=ndjson&length=1";
    let first = Streamed::whole(post(&app.client, &base(&app), "sized", query), WITHIN).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    buffered(&first, &upstream.first_of("sized"));
    stored(&redis).await;
    let replay = Streamed::whole(post(&app.client, &base(&app), "sized", query), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == first.body);
    assert_eq!(upstream.executions_of("sized"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_streaming_buffer_buffers_event_streams() {
    let knobs = Knobs {
        route: "in_flight = \"wait\"\nwait_timeout = \"30s\"\nstreaming = \"buffer\"\n",
        ..KNOBS
    };
    let (_redis, upstream, app) = setup(knobs).await;
    let query = "events=6&gap_ms=200";
    let first = Streamed::whole(post(&app.client, &base(&app), "held", query), WITHIN).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    buffered(&first, &upstream.first_of("held"));
    let replay = Streamed::whole(post(&app.client, &base(&app), "held", query), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == first.body);
    assert_eq!(upstream.executions_of("held"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_a_release_status_is_buffered_and_releases_the_key() {
    let (redis, upstream, app) = setup(KNOBS).await;
    let query = "events=5&gap_ms=150&status=503";
    for run in 1..=2 {
        let answer = Streamed::whole(post(&app.client, &base(&app), "busy", query), WITHIN).await;
        assert_eq!(answer.status, 503);
        assert_eq!(
            answer.header("idempotent-replayed"),
            Some("false"),
            "run {run}"
        );
        let ran = upstream.of("busy");
        assert_eq!(ran.len(), run, "released: the retry ran the upstream again");
        buffered(&answer, &ran[run - 1]);
        assert!(redis.records().await.is_empty(), "released, not stored");
    }
}

/// HTTP/2 on both sides (an h2c upstream answering without a length, an h2c client):
/// the answer streams live as DATA frames, and the replay is the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_on_both_sides_an_answer_streams_live() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let route = sse_route(&upstream).replace(
        "upstream_timeout",
        "upstream_protocol = \"h2c\"\nupstream_timeout",
    );
    let app = gateway(&redis, &route, KNOBS).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let query = "events=8&gap_ms=200&type=ndjson";
    let first = Streamed::whole(post(&h2, &base(&app), "h2", query), WITHIN).await;
    let ran = upstream.first_of("h2");
    assert_eq!(ran.version, axum::http::Version::HTTP_2, "an h2c upstream");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.body == ran.body());
    for (i, (&at, &out)) in first.events_at.iter().zip(&ran.sent).enumerate() {
        let late = since(at, out);
        assert!(late < LIVE, "piece {i} took {late:?}");
    }
    stored(&redis).await;
    let replay = Streamed::whole(post(&h2, &base(&app), "h2", query), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == first.body);
    assert_eq!(upstream.executions_of("h2"), 1);
}
