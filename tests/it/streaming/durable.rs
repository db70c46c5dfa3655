//! Live streams and the durable tier (`[postgres]`): by the time the first client sees
//! its stream end, the record is committed in Postgres as well, so a Redis that comes
//! back empty loses nothing (the retry replays it byte for byte from Postgres); and with
//! Redis down (claims in Postgres) an answer still streams to its first client, while a
//! duplicate has nothing to join (nor to wait on: 409, as before live streaming) and a
//! retry after the end replays the stored answer. With `redis_fill = "on_replay"` a
//! live answer is still completed in Redis.

use std::time::Duration;

use super::{base, gateway, post, since, sse_route, End, Knobs, Streamed, KNOBS, WAIT};
use crate::support::{eventually, problem_code, PgServer, RedisServer, SseUpstream, TestApp};

const WITHIN: Duration = Duration::from_secs(20);
const QUERY: &str = "events=10&gap_ms=200";

/// Redis, Postgres (claims in Redis while it is up), the SSE upstream and a gateway.
async fn durable() -> (RedisServer, PgServer, SseUpstream, TestApp) {
    durable_with("claims = \"redis\"").await
}

/// As [`durable`], with `postgres` as the `[postgres]` section's own lines.
async fn durable_with(postgres: &str) -> (RedisServer, PgServer, SseUpstream, TestApp) {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = SseUpstream::start().await;
    let route = format!("{WAIT}{}", pg.section(postgres));
    let knobs = Knobs {
        route: &route,
        ..KNOBS
    };
    let app = gateway(&redis, &sse_route(&upstream), knobs).await;
    (redis, pg, upstream, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_in_postgres_when_its_client_sees_the_end_and_survives_redis() {
    let (mut redis, pg, upstream, app) = durable().await;
    let first = Streamed::whole(post(&app.client, &base(&app), "kept", QUERY), WITHIN).await;
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert_eq!(first.header("content-length"), None, "streamed live");
    assert_eq!(
        pg.count("state = 'completed'").await,
        1,
        "committed before the client saw the end"
    );

    redis.restart();
    let mut replay = None;
    let replayed = eventually(Duration::from_secs(10), async || {
        let request = post(&app.client, &base(&app), "kept", QUERY);
        let answer = Streamed::whole(request, WITHIN).await;
        let done = answer.status == 200;
        replay = Some(answer);
        done
    })
    .await;
    let replay = replay.unwrap();
    let text = String::from_utf8_lossy(&replay.body);
    assert!(replayed, "no replay once Redis came back empty: {text}");
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == first.body, "byte for byte: {text}");
    for name in ["content-type", "x-stream-id"] {
        assert_eq!(replay.header(name), first.header(name), "{name}");
    }
    assert_eq!(upstream.executions_of("kept"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_a_stream_still_streams_and_its_retry_replays_it_after() {
    let (mut redis, pg, upstream, app) = durable().await;
    redis.stop();
    let http = reqwest::Client::new();
    let first = post(&http, &base(&app), "outage", QUERY);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    let started = eventually(Duration::from_secs(10), async || {
        upstream
            .of("outage")
            .first()
            .is_some_and(|e| e.sent.len() >= 3)
    })
    .await;
    assert!(started, "the first request never reached the upstream");
    let duplicate = Streamed::whole(post(&http, &base(&app), "outage", QUERY), WITHIN).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("outage");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(first.body == ran.body());
    let late = since(first.events_at[0], ran.sent[0]);
    assert!(
        late < Duration::from_millis(500),
        "first event {late:?} late"
    );

    // Nothing to join without Redis, nor to wait on (the waiters and their wake-ups
    // live in Redis): told "in flight" at once, as before live streaming.
    let text = String::from_utf8_lossy(&duplicate.body);
    assert_eq!(duplicate.status, 409, "{text}");
    let code = problem_code(&duplicate.headers, &duplicate.body);
    assert_eq!(code, "idempotency_key_in_flight");
    // After the end: the stored answer, whole, from Postgres.
    let retry = Streamed::whole(post(&http, &base(&app), "outage", QUERY), WITHIN).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert!(retry.body == first.body);
    let length = retry.body.len().to_string();
    assert_eq!(retry.header("content-length"), Some(length.as_str()));
    assert_eq!(pg.count("state = 'completed'").await, 1);
    assert_eq!(upstream.executions_of("outage"), 1);
}

/// `redis_fill = "on_replay"` leaves Redis to the first retry, except for a live
/// answer: it is completed in Redis too, where its joiners look for the record (a
/// joiner ends cleanly once the key stores the bytes it read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filled_on_replay_a_live_answer_is_still_completed_in_redis() {
    let (redis, pg, upstream, app) =
        durable_with("claims = \"write_through\"\nredis_fill = \"on_replay\"").await;
    let first = post(&app.client, &base(&app), "live", QUERY);
    let first = tokio::spawn(Streamed::whole(first, WITHIN));
    super::upstream_sent(&upstream, "live", 2).await;
    let joiner = Streamed::whole(post(&app.client, &base(&app), "live", QUERY), WITHIN).await;
    let first = first.await.unwrap();
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert_eq!(joiner.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        joiner.end,
        End::Clean,
        "the joiner's end, once the key stores it"
    );
    assert!(
        joiner.body == first.body,
        "the joiner got the first client's bytes"
    );
    assert_eq!(first.header("content-length"), None, "streamed live");
    assert_eq!(pg.count("state = 'completed'").await, 1);
    let states = redis.record_states().await;
    assert_eq!(states.len(), 1, "{states:?}");
    assert_eq!(states[0].1.as_deref(), Some("C"), "completed in redis");
    let replay = Streamed::whole(post(&app.client, &base(&app), "live", QUERY), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == first.body, "byte for byte");
    assert_eq!(upstream.executions_of("live"), 1);
}
