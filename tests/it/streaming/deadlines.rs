//! The route's clocks on a live answer: `upstream_timeout` bounds the wait for the
//! head only (a stream that outlasts it is not cut; a head later than it gets the
//! client 504 `upstream_timeout` while the call goes on and its stream is recorded for
//! the retries), and `upstream_deadline` bounds the whole answer (a stream still
//! running then is cut for its first client and its joiners, and the key stores the
//! 504 `upstream_outcome_unknown`: the upstream may have acted).

use std::time::Duration;

use super::{base, post, replicas, since, sse_route, stored, upstream_sent, End, Streamed, KNOBS};
use crate::support::{problem_code, read, RedisServer, SseUpstream, TestApp};

const WITHIN: Duration = Duration::from_secs(20);

/// Two replicas whose route has `upstream_timeout = 1s` and `upstream_deadline = 3s`.
async fn short_clocks(redis: &RedisServer, upstream: &SseUpstream) -> (TestApp, TestApp) {
    let route = sse_route(upstream).replace(
        "upstream_timeout = \"30s\"",
        "upstream_timeout = \"1s\"\nupstream_deadline = \"3s\"",
    );
    assert!(route.contains("upstream_deadline"), "{route}");
    replicas(redis, &route, KNOBS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_may_outlast_upstream_timeout_but_not_upstream_deadline() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, two) = short_clocks(&redis, &upstream).await;
    let http = reqwest::Client::new();

    // 2 s of events: past upstream_timeout (1 s), within upstream_deadline (3 s).
    let query = "events=9&gap_ms=250";
    let whole = Streamed::whole(post(&http, &base(&one), "long", query), WITHIN).await;
    assert_eq!((whole.status, &whole.end), (200, &End::Clean));
    assert!(whole.body == upstream.first_of("long").body());

    // 5 s of events: cut at the deadline, for the first client and a joiner alike.
    let query = "events=21&gap_ms=250";
    let first = tokio::spawn(Streamed::whole(
        post(&http, &base(&one), "endless", query),
        WITHIN,
    ));
    upstream_sent(&upstream, "endless", 3).await;
    // Read for long enough to see when it ends, well past the lock_ttl (30 s) a
    // stream that nobody ends lives on.
    let joiner = post(&http, &base(&two), "endless", query);
    let joiner = Streamed::whole(joiner, Duration::from_secs(45)).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("endless");
    assert!(!ran.finished, "the upstream's stream was cut");
    for (who, answer) in [("first", &first), ("joiner", &joiner)] {
        assert_eq!(answer.status, 200, "{who}");
        assert!(
            matches!(answer.end, End::Aborted(_)),
            "{who}: {:?} after {} bytes",
            answer.end,
            answer.body.len()
        );
        assert!(ran.body().starts_with(&answer.body), "{who}");
        let took = since(answer.ended.unwrap(), first.sent);
        assert!(
            took > Duration::from_millis(2500) && took < Duration::from_secs(5),
            "{who}: cut {took:?} after the request (deadline 3 s)"
        );
    }
    stored(&redis).await;
    let retry = post(&http, &base(&two), "endless", query).send().await;
    let (status, headers, body) = read(retry.unwrap()).await;
    assert_eq!(status, 504, "{}", String::from_utf8_lossy(&body));
    assert_eq!(problem_code(&headers, &body), "upstream_outcome_unknown");
    assert_eq!(upstream.executions_of("long"), 1);
    assert_eq!(upstream.executions_of("endless"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_later_than_upstream_timeout_gets_504_and_the_stream_is_kept() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, _two) = short_clocks(&redis, &upstream).await;
    let http = reqwest::Client::new();
    // The head after 1.5 s, then six events in 1 s: done well within the deadline.
    let query = "events=6&gap_ms=200&head_ms=1500";
    let first = post(&http, &base(&one), "late-head", query).send().await;
    let (status, headers, body) = read(first.unwrap()).await;
    assert_eq!(status, 504, "{}", String::from_utf8_lossy(&body));
    assert_eq!(problem_code(&headers, &body), "upstream_timeout");

    // The call went on; its stream was recorded and stored for the retries.
    stored(&redis).await;
    let ran = upstream.first_of("late-head");
    assert!(ran.finished, "the call went on after the client's 504");
    let retry = Streamed::whole(post(&http, &base(&one), "late-head", query), WITHIN).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert!(retry.body == ran.body(), "the whole stream");
    assert_eq!(upstream.executions_of("late-head"), 1);
}
