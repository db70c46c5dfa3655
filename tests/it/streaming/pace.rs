//! The first client's pace. Within `server.max_response_body` a first client that stops
//! reading holds nothing back: the answer is read to its end and stored, and a retry
//! replays it while that client still reads nothing. Past the limit the gateway reads
//! the upstream only as fast as that client takes the answer (a bounded window ahead,
//! never the whole of it in memory), until `server.write_timeout` cuts a client that
//! reads nothing at all; then the rest is read and the key stores the 502. Tens of MB,
//! far more than the sockets between the upstream, the gateway and the client hold.

use std::time::Duration;

use super::{base, gateway, post, sse_route, stored, End, Knobs, Streamed, KNOBS};
use crate::support::{eventually, problem_code, read, RedisServer, SseUpstream, TestApp};

const WITHIN: Duration = Duration::from_secs(20);

async fn setup(knobs: Knobs<'_>) -> (RedisServer, SseUpstream, TestApp) {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let app = gateway(&redis, &sse_route(&upstream), knobs).await;
    (redis, upstream, app)
}

/// A first client that stops reading holds nothing back while the answer fits the
/// record (`max_response_body`): the gateway reads the upstream to its end (32 MB, far
/// more than the sockets between them hold), stores it, and a retry replays it while
/// that client still has not read; then the client reads it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_client_that_stops_reading_holds_back_neither_the_upstream_nor_the_record() {
    let knobs = Knobs {
        server: "max_response_body = \"40MiB\"\n",
        ..KNOBS
    };
    let (redis, upstream, app) = setup(knobs).await;
    let query = "events=64&gap_ms=5&size=500000";
    let request = post(&app.client, &base(&app), "stalled", query);
    let mut first = Streamed::open(request, WITHIN).await;
    first.read(1, WITHIN).await;
    assert_eq!((first.status, first.events_at.is_empty()), (200, false));
    // It reads nothing more meanwhile.
    let finished = eventually(Duration::from_secs(15), async || {
        upstream.first_of("stalled").finished
    })
    .await;
    let ran = upstream.first_of("stalled");
    assert!(
        finished,
        "the upstream stalled with the first client: {} of 64 events sent",
        ran.sent.len()
    );
    stored(&redis).await;
    let replay = post(&app.client, &base(&app), "stalled", query);
    let replay = Streamed::whole(replay, WITHIN).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == ran.body(), "{} bytes", replay.body.len());
    assert_eq!(first.end, End::Open, "the first client is still there");
    first.finish(WITHIN).await;
    assert_eq!(first.end, End::Clean);
    assert!(first.body == ran.body(), "{} bytes", first.body.len());
    assert_eq!(upstream.executions_of("stalled"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_a_client_that_stops_reading_holds_the_upstream_until_cut_off() {
    let knobs = Knobs {
        server: "max_response_body = \"64KiB\"\nwrite_timeout = \"3s\"\n",
        ..KNOBS
    };
    let (redis, upstream, app) = setup(knobs).await;
    // 48 MB in 48 events, 5 ms apart: a quarter of a second if nothing held it back.
    let query = "events=48&gap_ms=5&size=1000000";
    let request = post(&app.client, &base(&app), "paced", query);
    let mut first = Streamed::open(request, WITHIN).await;
    first.read(1, WITHIN).await;
    assert_eq!(first.status, 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = upstream.first_of("paced").sent.len();
    assert!(
        held < 48,
        "the gateway read all 48 MB while its client read nothing: buffered, not paced"
    );

    // Still nothing read: `write_timeout` cuts the client off (3 s after its socket
    // filled); the rest is read, and the key stores the 502.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    first.finish(WITHIN).await;
    assert!(matches!(first.end, End::Aborted(_)), "{:?}", first.end);
    let read_all = eventually(Duration::from_secs(10), async || {
        upstream.first_of("paced").finished
    })
    .await;
    assert!(
        read_all,
        "the upstream was left hanging once the client was cut off"
    );
    stored(&redis).await;
    let retry = post(&app.client, &base(&app), "paced", query).send().await;
    let (status, headers, body) = read(retry.unwrap()).await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    assert_eq!(problem_code(&headers, &body), "upstream_response_too_large");
    assert_eq!(upstream.executions_of("paced"), 1);
}
