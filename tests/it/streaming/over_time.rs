//! A live answer that lasts: a stream longer than the route's `ttl` is kept for `ttl`
//! from its end (its head's `Idempotency-Expires` is a lower bound of that), and a
//! joiner attached longer than a waiter's place lasts (twice `wait_timeout`) still
//! counts against `max_waiters`.

use std::time::{Duration, Instant};

use super::{base, post, replicas, sse_route, End, Knobs, Streamed};
use crate::support::{RedisServer, SseUpstream};

const WITHIN: Duration = Duration::from_secs(20);

fn expires(streamed: &Streamed) -> std::time::SystemTime {
    let value = streamed
        .header("idempotency-expires")
        .expect("Idempotency-Expires");
    httpdate::parse_http_date(value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_its_ttl_is_kept_for_ttl_from_its_end() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let knobs = Knobs {
        server: "",
        route: "in_flight = \"wait\"\nlock_ttl = \"3s\"\nttl = \"3s\"\n",
        command_timeout: "800ms",
    };
    let (one, two) = replicas(&redis, &sse_route(&upstream), knobs).await;
    let http = reqwest::Client::new();
    // 25 events 200 ms apart: about 5 s, longer than the ttl.
    let query = "events=25&gap_ms=200";
    let first = Streamed::whole(post(&http, &base(&one), "long", query), WITHIN).await;
    let ended = Instant::now();
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.sent.elapsed() > Duration::from_secs(4));
    super::stored(&redis).await;

    // A second after its end: past the head's ttl, within the end's.
    tokio::time::sleep_until((ended + Duration::from_secs(1)).into()).await;
    let retry = Streamed::whole(post(&http, &base(&two), "long", query), WITHIN).await;
    assert_eq!(
        upstream.executions_of("long"),
        1,
        "a stream longer than its ttl was stored already expired"
    );
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert!(retry.body == first.body);
    // The head promised less than is kept: the replay's expiry is later by about the
    // stream's length (whole seconds).
    let later = expires(&retry).duration_since(expires(&first)).unwrap();
    assert!(
        (Duration::from_secs(4)..=Duration::from_secs(7)).contains(&later),
        "the replay's expiry is {later:?} after the head's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_counts_against_max_waiters_for_as_long_as_it_is_attached() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    // One waiter at most; a waiter's place lasts 2 s unless renewed.
    let knobs = Knobs {
        server: "",
        route: "in_flight = \"wait\"\nwait_timeout = \"1s\"\nmax_waiters = 1\n",
        command_timeout: "2s",
    };
    let (one, two) = replicas(&redis, &sse_route(&upstream), knobs).await;
    let http = reqwest::Client::new();
    // 30 events 200 ms apart: 6 s.
    let query = "events=30&gap_ms=200";
    let first = tokio::spawn(Streamed::whole(
        post(&http, &base(&one), "capped", query),
        WITHIN,
    ));
    super::upstream_sent(&upstream, "capped", 2).await;
    let mut joiner = Streamed::open(post(&http, &base(&two), "capped", query), WITHIN).await;
    assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
    let joined = Instant::now();

    // Past the place's first lapse, still attached: the cap still counts it.
    joiner.read(18, WITHIN).await;
    tokio::time::sleep_until((joined + Duration::from_millis(3200)).into()).await;
    assert_eq!(joiner.end, End::Open, "the joiner is still attached");
    let late = Streamed::whole(post(&http, &base(&one), "capped", query), WITHIN).await;
    assert_eq!(
        late.status,
        409,
        "a duplicate got past max_waiters = 1 while a joiner was attached: {}",
        String::from_utf8_lossy(&late.body)
    );
    joiner.finish(WITHIN).await;
    assert_eq!(joiner.end, End::Clean);
    assert_eq!(first.await.unwrap().end, End::Clean);
    assert_eq!(upstream.executions_of("capped"), 1);
}
