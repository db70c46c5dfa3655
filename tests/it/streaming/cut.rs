//! An upstream that breaks off mid-stream (its connection closed before the last
//! chunk): the first client's body and a joiner's (on another replica) end in an error,
//! never in a clean end that would pass the cut answer off as whole, and the key is
//! settled as any call whose outcome is unknown (`on_ambiguous`): with `"store"` (the
//! default) every retry gets the stored 502 `upstream_outcome_unknown` and the upstream
//! ran once; with `"release"` a retry runs it again.

use std::time::Duration;

use super::{
    base, post, replicas, since, sse_route, stored, upstream_sent, End, Knobs, Streamed, KNOBS,
};
use crate::support::{problem_code, read, RedisServer, SseUpstream, TestApp};

const WITHIN: Duration = Duration::from_secs(20);
/// Ten events 200 ms apart, broken off after the sixth.
const CUT: &str = "events=10&gap_ms=200&cut_after=6";

/// Runs a stream of `key` that the upstream breaks off, with a joiner on the other
/// replica: asserts both bodies were cut after the events sent.
async fn cut_stream(upstream: &SseUpstream, one: &TestApp, two: &TestApp, key: &str) {
    let http = reqwest::Client::new();
    let first = post(&http, &base(one), key, CUT);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    upstream_sent(upstream, key, 3).await;
    let joiner = Streamed::whole(post(&http, &base(two), key, CUT), WITHIN).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of(key);
    assert_eq!(
        ran.sent.len(),
        6,
        "the upstream sent six events, then broke off"
    );
    let sent = ran.events_from(0);
    let sent = &sent[..sent.len() - ran.events_from(6).len()];
    for (who, answer, replayed) in [("first", &first, "false"), ("joiner", &joiner, "true")] {
        assert_eq!(answer.status, 200, "{who}");
        assert_eq!(
            answer.header("idempotent-replayed"),
            Some(replayed),
            "{who}"
        );
        assert!(
            matches!(answer.end, End::Aborted(_)),
            "{who}: a cut answer must end in an error: {:?} after {} bytes",
            answer.end,
            answer.body.len()
        );
        assert!(
            answer.body == sent,
            "{who}: the six events sent: {}",
            String::from_utf8_lossy(&answer.body)
        );
        // Cut when the upstream broke off (one gap after its sixth event), not later.
        let broke = ran.sent[5] + Duration::from_millis(200);
        let late = since(answer.ended.unwrap(), broke);
        assert!(
            late < Duration::from_secs(1),
            "{who}: cut {late:?} after the break"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_upstream_breaks_off_is_cut_for_all_and_stored_as_unknown() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, two) = replicas(&redis, &sse_route(&upstream), KNOBS).await;
    cut_stream(&upstream, &one, &two, "broken").await;

    stored(&redis).await;
    for app in [&one, &two] {
        let retry = post(&app.client, &base(app), "broken", CUT).send().await;
        let (status, headers, body) = read(retry.unwrap()).await;
        assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(problem_code(&headers, &body), "upstream_outcome_unknown");
    }
    assert_eq!(upstream.executions_of("broken"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_ambiguous_release_a_retry_of_a_broken_stream_runs_again() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let knobs = Knobs {
        route: "in_flight = \"wait\"\nwait_timeout = \"30s\"\non_ambiguous = \"release\"\n",
        ..KNOBS
    };
    let (one, two) = replicas(&redis, &sse_route(&upstream), knobs).await;
    cut_stream(&upstream, &one, &two, "released").await;

    // Released: nothing stored, and the retry is a first execution again.
    let released = crate::support::eventually(Duration::from_secs(5), async || {
        redis.records().await.is_empty()
    })
    .await;
    assert!(
        released,
        "still a record: {:?}",
        redis.record_states().await
    );
    let retry = Streamed::whole(post(&two.client, &base(&two), "released", CUT), WITHIN).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    assert!(matches!(retry.end, End::Aborted(_)), "{:?}", retry.end);
    assert_eq!(upstream.executions_of("released"), 2);
}
