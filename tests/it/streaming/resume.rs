//! SSE resume: a retry or a joiner of a keyed event stream that sends `Last-Event-ID`
//! (as EventSource does when it reconnects) gets only the events after the one with
//! that `id:`, from the stored answer or from the live one (on another replica), with
//! the status and headers unchanged; an id the answer never held resumes nothing (the
//! whole answer). The upstream runs once.

use std::time::{Duration, Instant};

use super::{
    base, gateway, post, replicas, since, sse_route, stored, upstream_sent, End, Streamed, KNOBS,
};
use crate::support::{RedisServer, SseUpstream};

/// Ten events (ids 0 to 9), 200 ms apart.
const TEN: &str = "events=10&gap_ms=200";
const LIVE: Duration = Duration::from_millis(500);
const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_last_event_id_replays_only_the_events_after_it() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let app = gateway(&redis, &sse_route(&upstream), KNOBS).await;
    let base = base(&app);
    let first = Streamed::whole(post(&app.client, &base, "resume", TEN), WITHIN).await;
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    let ran = upstream.first_of("resume");
    assert!(first.body == ran.body());
    stored(&redis).await;

    let after = |id: &'static str| {
        let request = post(&app.client, &base, "resume", TEN).header("Last-Event-ID", id);
        Streamed::whole(request, WITHIN)
    };
    let retry = after("3").await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.end, End::Clean);
    assert_eq!(
        String::from_utf8_lossy(&retry.body),
        String::from_utf8_lossy(&ran.events_from(4)),
        "events 4 to 9"
    );
    let length = retry.body.len().to_string();
    assert_eq!(retry.header("content-length"), Some(length.as_str()));
    for name in ["content-type", "cache-control", "x-stream-id"] {
        assert_eq!(retry.header(name), first.header(name), "{name}");
    }
    // After the last event: nothing more. An id it never held: the whole answer.
    let done = after("9").await;
    assert_eq!((done.status, done.body.len()), (200, 0));
    for unknown in ["10", "nope"] {
        let whole = after(unknown).await;
        assert_eq!(whole.status, 200);
        assert!(whole.body == first.body, "Last-Event-ID {unknown}");
    }
    assert_eq!(upstream.executions_of("resume"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joiners_with_last_event_id_get_the_live_stream_after_it() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, two) = replicas(&redis, &sse_route(&upstream), KNOBS).await;
    let http = reqwest::Client::new();
    let query = "events=12&gap_ms=250";
    let first = post(&http, &base(&one), "rejoin", query);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    upstream_sent(&upstream, "rejoin", 5).await;

    // One resumes after an event already sent (2), one after an event still to come (9).
    let joined = Instant::now();
    let join = |id: &'static str| {
        let request = post(&http, &base(&two), "rejoin", query).header("Last-Event-ID", id);
        Streamed::whole(request, WITHIN)
    };
    let (behind, ahead) = tokio::join!(join("2"), join("9"));
    let first = first.await.unwrap();
    let ran = upstream.first_of("rejoin");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.body == ran.body());
    for (who, joiner, from) in [("behind", &behind, 3), ("ahead", &ahead, 10)] {
        assert_eq!(joiner.status, 200, "{who}");
        assert_eq!(joiner.header("idempotent-replayed"), Some("true"), "{who}");
        assert_eq!(joiner.header("x-stream-id"), Some(ran.id.as_str()), "{who}");
        assert_eq!(joiner.end, End::Clean, "{who}");
        assert_eq!(
            String::from_utf8_lossy(&joiner.body),
            String::from_utf8_lossy(&ran.events_from(from)),
            "{who}: the events from {from} on"
        );
        // Each event as soon as it was both sent and joined.
        for (i, &at) in joiner.events_at.iter().enumerate() {
            let sent = ran.sent[from + i].max(joined);
            let late = since(at, sent);
            assert!(late < LIVE, "{who}: event {} came {late:?} late", from + i);
        }
    }
    assert_eq!(upstream.executions_of("rejoin"), 1);
}
