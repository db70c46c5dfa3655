//! Duplicates of a keyed SSE stream that is still running, with `in_flight = "wait"`,
//! JOIN it on whichever replica they reach (two gateways on one Redis): the status and
//! headers as a replay (`Idempotent-Replayed: true`), the bytes recorded so far at
//! once, then the rest as the upstream sends it, byte-identical to what the first
//! client got, from the one upstream execution.

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::{base, post, replicas, since, sse_route, stored, upstream_sent, End, Streamed, KNOBS};
use crate::support::{RedisServer, SseUpstream};

/// What a joiner may take to get bytes the upstream has sent (the recorded ones at
/// once, the later ones as they come); a joiner answered only at the end of the stream
/// gets them seconds late.
const LIVE: Duration = Duration::from_millis(500);
const WITHIN: Duration = Duration::from_secs(20);

/// Asserts that `joiner` joined the stream `first` got: a replay of the same execution,
/// the same bytes, to the end.
fn same_stream(joiner: &Streamed, first: &Streamed, id: &str) {
    let body = String::from_utf8_lossy(&joiner.body);
    assert_eq!(joiner.status, 200, "{body}");
    assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
    assert_eq!(joiner.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        joiner.header("x-stream-id"),
        Some(id),
        "the first's execution"
    );
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(
        joiner.header("x-ratelimit-remaining"),
        None,
        "a per-exchange header, not replayed"
    );
    assert_eq!(joiner.end, End::Clean, "{body}");
    assert!(joiner.body == first.body, "joiner: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_on_another_replica_joins_the_live_stream() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, two) = replicas(&redis, &sse_route(&upstream), KNOBS).await;
    let http = reqwest::Client::new();
    let query = "events=12&gap_ms=250";
    let first = post(&http, &base(&one), "joined", query);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    upstream_sent(&upstream, "joined", 4).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let joined = Instant::now();
    let joiner = post(&http, &base(&two), "joined", query);
    let mut joiner = Streamed::open(joiner, WITHIN).await;
    joiner.read(5, WITHIN).await;
    // Joined through the key's Redis Stream, in the record's hash slot.
    let keys = redis.keys().await;
    assert!(
        keys.iter()
            .any(|k| k.starts_with("idemgate:{") && k.ends_with("}:live")),
        "no live stream in Redis: {keys:?}"
    );
    joiner.finish(WITHIN).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("joined");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    same_stream(&joiner, &first, &ran.id);
    assert!(joiner.body == ran.body());

    // The bytes recorded before it came: at once, long before the stream ended.
    let recorded = ran.sent.iter().filter(|&&at| at <= joined).count();
    assert!(recorded >= 4);
    let so_far = joiner.events_at[recorded - 1];
    assert!(
        since(so_far, joined) < LIVE,
        "the {recorded} events recorded when it joined came {:?} after",
        since(so_far, joined)
    );
    let end = *ran.sent.last().unwrap();
    assert!(
        so_far + Duration::from_secs(1) < end,
        "joined only {:?} before the stream's end",
        since(end, so_far)
    );
    // The rest as the upstream sent it.
    for i in recorded..ran.events {
        let late = since(joiner.events_at[i], ran.sent[i]);
        assert!(late < LIVE, "event {i} reached the joiner {late:?} late");
    }
    assert_eq!(upstream.executions_of("joined"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_duplicates_join_at_once_on_either_replica() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, two) = replicas(&redis, &sse_route(&upstream), KNOBS).await;
    let http = reqwest::Client::new();
    let query = "events=10&gap_ms=250";
    let first = post(&http, &base(&one), "crowd", query);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    upstream_sent(&upstream, "crowd", 3).await;

    // Six at once: three on the replica running the stream, three on the other.
    let joined = Instant::now();
    let joiners = join_all((0..6).map(|i| {
        let app = if i % 2 == 0 { &two } else { &one };
        Streamed::whole(post(&http, &base(app), "crowd", query), WITHIN)
    }))
    .await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("crowd");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.body == ran.body());
    let recorded = ran.sent.iter().filter(|&&at| at <= joined).count();
    let end = *ran.sent.last().unwrap();
    for (i, joiner) in joiners.iter().enumerate() {
        same_stream(joiner, &first, &ran.id);
        let so_far = joiner.events_at[recorded - 1];
        assert!(
            since(so_far, joined) < LIVE + Duration::from_millis(300),
            "joiner {i}: the recorded events came {:?} after it joined",
            since(so_far, joined)
        );
        assert!(
            so_far + Duration::from_secs(1) < end,
            "joiner {i} got the recorded events only {:?} before the end",
            since(end, so_far)
        );
    }
    assert_eq!(upstream.executions_of("crowd"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_that_comes_before_the_upstreams_head_joins_too() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let (one, two) = replicas(&redis, &sse_route(&upstream), KNOBS).await;
    let http = reqwest::Client::new();
    // The head (and the first event with it) 800 ms after the request.
    let query = "events=8&gap_ms=200&head_ms=800";
    let first = post(&http, &base(&one), "early", query);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    let received = crate::support::eventually(Duration::from_secs(10), async || {
        upstream.executions_of("early") == 1
    })
    .await;
    assert!(received, "the first request never reached the upstream");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        upstream.first_of("early").sent.is_empty(),
        "the upstream answered too soon for this test"
    );

    let joiner = post(&http, &base(&two), "early", query);
    let joiner = Streamed::whole(joiner, WITHIN).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("early");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    same_stream(&joiner, &first, &ran.id);
    assert!(joiner.body == ran.body());
    let end = *ran.sent.last().unwrap();
    assert!(
        joiner.events_at[0] < end,
        "the joiner's first event came {:?} after the upstream's last",
        since(joiner.events_at[0], end)
    );
    for (i, (&at, &out)) in joiner.events_at.iter().zip(&ran.sent).enumerate() {
        let late = since(at, out);
        assert!(late < LIVE, "event {i} reached the joiner {late:?} late");
    }
    assert_eq!(upstream.executions_of("early"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_of_a_stream_over_the_limit_gets_the_bytes_up_to_it_then_a_cut() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let knobs = super::Knobs {
        server: "max_response_body = \"64KiB\"\n",
        ..KNOBS
    };
    let (one, two) = replicas(&redis, &sse_route(&upstream), knobs).await;
    let http = reqwest::Client::new();
    // Twelve events of ~10 KB, 200 ms apart: the limit is crossed by the seventh.
    let query = "events=12&gap_ms=200&size=10000";
    let first = post(&http, &base(&one), "over", query);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    upstream_sent(&upstream, "over", 2).await;
    // One joiner over HTTP/1.1 (cut: the connection closes before the last chunk), one
    // over HTTP/2 (cut: its stream is reset).
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let (h1_joiner, h2_joiner) = tokio::join!(
        Streamed::whole(post(&http, &base(&two), "over", query), WITHIN),
        Streamed::whole(post(&h2, &base(&two), "over", query), WITHIN),
    );
    let first = first.await.unwrap();
    let ran = upstream.first_of("over");
    assert_eq!(first.status, 200);
    assert!(matches!(first.end, End::Aborted(_)), "the key stores a 502");
    assert!(first.body == ran.body(), "the first client gets every byte");

    for (who, joiner) in [("HTTP/1.1", &h1_joiner), ("HTTP/2", &h2_joiner)] {
        assert_eq!(joiner.status, 200, "{who}");
        assert_eq!(joiner.header("idempotent-replayed"), Some("true"), "{who}");
        assert!(
            matches!(joiner.end, End::Aborted(_)),
            "{who}: a joiner's answer past the limit is cut, not ended: {:?} after {} bytes",
            joiner.end,
            joiner.body.len()
        );
        assert!(
            ran.body().starts_with(&joiner.body),
            "{who}: the stream's bytes"
        );
        assert!(
            joiner.body.len() <= 64 * 1024 && joiner.body.len() >= 40_000,
            "{who}: the bytes up to the limit: {}",
            joiner.body.len()
        );
    }
    // The key keeps the 502, for the retries.
    stored(&redis).await;
    let retry = post(&http, &base(&two), "over", query)
        .send()
        .await
        .unwrap();
    let (status, headers, body) = crate::support::read(retry).await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let code = crate::support::problem_code(&headers, &body);
    assert_eq!(code, "upstream_response_too_large");
    assert_eq!(upstream.executions_of("over"), 1);
}

/// Joiners hold their `max_waiters` places until their answer ends: with two joined,
/// a third duplicate is told "in flight" at once; once the stream is stored, a retry
/// replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joiners_count_against_max_waiters_until_their_answer_ends() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let knobs = super::Knobs {
        route: "in_flight = \"wait\"\nwait_timeout = \"30s\"\nmax_waiters = 2\n",
        ..KNOBS
    };
    let (one, two) = replicas(&redis, &sse_route(&upstream), knobs).await;
    let http = reqwest::Client::new();
    let query = "events=10&gap_ms=250";
    let first = post(&http, &base(&one), "bounded", query);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    upstream_sent(&upstream, "bounded", 2).await;
    let mut joiners = Vec::new();
    for app in [&two, &one] {
        let mut joiner = Streamed::open(post(&http, &base(app), "bounded", query), WITHIN).await;
        joiner.read(2, WITHIN).await;
        assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
        joiners.push(joiner);
    }
    let started = Instant::now();
    let third = post(&http, &base(&two), "bounded", query).send().await;
    let (status, headers, body) = crate::support::read(third.unwrap()).await;
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    let code = crate::support::problem_code(&headers, &body);
    assert_eq!(code, "idempotency_key_in_flight");
    assert!(started.elapsed() < Duration::from_secs(1), "at once");
    let ran = upstream.first_of("bounded");
    assert!(
        !ran.finished,
        "told while the two joiners were still reading"
    );

    let first = first.await.unwrap();
    for mut joiner in joiners {
        joiner.finish(WITHIN).await;
        same_stream(&joiner, &first, &ran.id);
    }
    stored(&redis).await;
    let retry = Streamed::whole(post(&http, &base(&two), "bounded", query), WITHIN).await;
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert!(retry.body == first.body);
    assert_eq!(upstream.executions_of("bounded"), 1);
}
