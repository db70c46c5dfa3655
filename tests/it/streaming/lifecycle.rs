//! A live answer meets a lifecycle event: its replica is stopped (SIGTERM) mid-stream,
//! its record is invalidated and the key runs again, its lease is taken over while its
//! replica is frozen. In each, no client may end with an answer that disagrees with
//! what the key keeps: a stopped stream settles its key before the replica exits (a
//! retry elsewhere replays the stored outcome, never a second execution), a duplicate
//! of a key's second execution follows that execution's stream only, and a first client
//! whose completion was refused sees a broken stream, never a clean end.

use std::time::{Duration, Instant};

use super::{
    base, gateway, gateway_process, post, sse_route, upstream_sent, End, Knobs, Streamed, KNOBS,
};
use fred::prelude::KeysInterface;

use crate::support::{eventually, RedisServer, SseUpstream};

const WITHIN: Duration = Duration::from_secs(20);
const LOCK_TTL: Duration = Duration::from_secs(3);
const GRACE: Duration = Duration::from_secs(4);
/// A lease of 3 s (a Redis command timeout of at most a third of it) and a grace of 4 s:
/// a stream of 20 s outlives both.
const SHORT: Knobs = Knobs {
    server: "shutdown_grace = \"4s\"\n",
    route: "in_flight = \"wait\"\nwait_timeout = \"30s\"\nlock_ttl = \"3s\"\n",
    command_timeout: "800ms",
};
const TOKEN: &str = "test-admin-token-0123456789";

/// SIGTERM while a keyed stream of 20 s runs: the first client's stream ends broken
/// within the grace, the key is settled as an unknown outcome before the replica exits,
/// and a retry on another replica after the lease would have run out replays that
/// outcome instead of running the stream again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stopped_by_sigterm_settles_its_key_before_the_replica_exits() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let route = sse_route(&upstream);
    let dir = tempfile::tempdir().unwrap();
    let mut stopped = gateway_process(dir.path(), "stopped", &redis, &route, SHORT).await;
    let survivor = gateway(&redis, &route, SHORT).await;
    let http = reqwest::Client::new();
    let query = "events=100&gap_ms=200";

    let mut first = Streamed::open(post(&http, &stopped.url(), "term", query), WITHIN).await;
    first.read(3, WITHIN).await;
    assert_eq!((first.status, &first.end), (200, &End::Open));
    stopped.signal("TERM");
    let termed = Instant::now();
    first.finish(GRACE + Duration::from_secs(2)).await;
    assert!(
        matches!(first.end, End::Aborted(_)),
        "the first client's stream ended {:?}; the replica's log:\n{}",
        first.end,
        stopped.log_text()
    );
    let exited = eventually(GRACE + Duration::from_secs(2), async || !stopped.running()).await;
    assert!(exited, "the replica did not exit within its grace");
    let log = stopped.log_text();
    assert!(
        log.contains("upstream outcome unknown; storing it"),
        "the stop did not settle the stream's key:\n{log}"
    );

    // Past the lease the replica would have left to lapse.
    tokio::time::sleep_until((termed + GRACE + LOCK_TTL).into()).await;
    let retry = Streamed::whole(post(&http, &base(&survivor), "term", query), WITHIN).await;
    assert_eq!(
        upstream.executions_of("term"),
        1,
        "the key ran again after the SIGTERM: {}",
        String::from_utf8_lossy(&retry.body)
    );
    assert_eq!(
        retry.status,
        502,
        "{}",
        String::from_utf8_lossy(&retry.body)
    );
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert!(String::from_utf8_lossy(&retry.body).contains("upstream_outcome_unknown"));
}

/// A key's first answer streams live and a duplicate joins it; the record is then
/// invalidated (admin API), which deletes its stream too, and the key runs again: a
/// duplicate of the second execution gets the second execution's bytes, as the key
/// stores them, never the first's, even with the first's stream put back in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_keys_second_execution_follows_that_execution_only() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let route = sse_route(&upstream);
    let server = format!("[admin]\ntoken = \"{TOKEN}\"\n");
    let knobs = Knobs {
        server: &server,
        ..KNOBS
    };
    let (one, two) = super::replicas(&redis, &route, knobs).await;
    let http = reqwest::Client::new();
    // The head 800 ms after the request, then 6 events 150 ms apart.
    let query = "events=6&gap_ms=150&head_ms=800";

    let first = tokio::spawn(Streamed::whole(
        post(&http, &base(&one), "again", query),
        WITHIN,
    ));
    upstream_sent(&upstream, "again", 2).await;
    let joiner = Streamed::whole(post(&http, &base(&two), "again", query), WITHIN).await;
    let first = first.await.unwrap();
    let ran = upstream.first_of("again");
    assert_eq!((first.status, &first.end), (200, &End::Clean));
    assert!(
        joiner.body == ran.body(),
        "the joiner followed the first execution"
    );
    super::stored(&redis).await;
    // The first execution's stream, kept aside to be put back after the invalidation.
    let keys = redis.keys().await;
    let live = (keys.iter().find(|k| k.ends_with(":live")))
        .expect("the first execution's live stream")
        .clone();
    let kept = format!("{live}:kept");
    let client = redis.client().await;
    let copied: bool = client.copy(&live, &kept, None, true).await.unwrap();
    assert!(copied);

    let deleted = http
        .delete(format!("http://{}/admin/keys/stream/again", one.admin))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200, "{}", deleted.text().await.unwrap());
    let keys = redis.keys().await;
    assert!(
        !keys.contains(&live),
        "the invalidation left the live stream: {keys:?}"
    );
    // Put back, as a stream an execution left behind would be: the next execution's
    // duplicate must not follow it (its head names the first execution).
    let () = client.rename(&kept, &live).await.unwrap();

    // The second execution; its duplicate comes before the upstream's head, while the
    // first execution's stream is in Redis.
    let second = tokio::spawn(Streamed::whole(
        post(&http, &base(&one), "again", query),
        WITHIN,
    ));
    let started = eventually(Duration::from_secs(5), async || {
        upstream.executions_of("again") == 2
    })
    .await;
    assert!(started, "the key did not run again after its invalidation");
    let duplicate = Streamed::whole(post(&http, &base(&two), "again", query), WITHIN).await;
    let second = second.await.unwrap();
    let runs = upstream.of("again");
    assert_eq!(runs.len(), 2);
    assert_eq!((second.status, &second.end), (200, &End::Clean));
    assert!(second.body == runs[1].body());
    assert_eq!(duplicate.end, End::Clean);
    assert!(
        duplicate.body == runs[1].body(),
        "the duplicate of the second execution got {}",
        match duplicate.body == runs[0].body() {
            true => "the first execution's bytes".to_string(),
            false => format!("other bytes: {}", String::from_utf8_lossy(&duplicate.body)),
        }
    );
    // And the key keeps the second.
    super::stored(&redis).await;
    let replay = Streamed::whole(post(&http, &base(&two), "again", query), WITHIN).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.body == runs[1].body());
}

/// The replica running a key's live answer is frozen (SIGSTOP) past its lease and
/// another execution takes the key over; thawed, the first execution's completion is
/// refused: its first client's stream ends broken, never cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_client_whose_lease_was_taken_over_sees_a_broken_stream() {
    let redis = RedisServer::start();
    let upstream = SseUpstream::start().await;
    let route = sse_route(&upstream);
    let dir = tempfile::tempdir().unwrap();
    let frozen = gateway_process(dir.path(), "frozen", &redis, &route, SHORT).await;
    let other = gateway(&redis, &route, SHORT).await;
    let h1 = reqwest::Client::new();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let query = "events=30&gap_ms=200";

    // One first client over HTTP/1.1 (a broken end: no final chunk), one over HTTP/2
    // (a broken end: the stream is reset).
    let mut firsts = Vec::new();
    for (key, http) in [("taken-h1", &h1), ("taken-h2", &h2)] {
        let mut first = Streamed::open(post(http, &frozen.url(), key, query), WITHIN).await;
        first.read(2, WITHIN).await;
        assert_eq!((first.status, &first.end), (200, &End::Open), "{key}");
        firsts.push((key, first));
    }
    frozen.signal("STOP");
    // Past its lease: the keys are free, and other executions take them.
    tokio::time::sleep(LOCK_TTL + Duration::from_millis(500)).await;
    let takers: Vec<_> = (firsts.iter())
        .map(|(key, _)| {
            tokio::spawn(Streamed::whole(
                post(&h1, &base(&other), key, query),
                WITHIN,
            ))
        })
        .collect();
    let took = eventually(Duration::from_secs(5), async || {
        firsts
            .iter()
            .all(|(key, _)| upstream.executions_of(key) == 2)
    })
    .await;
    frozen.signal("CONT");
    assert!(took, "no other execution took the keys over");
    for ((key, mut first), taker) in firsts.into_iter().zip(takers) {
        let taker = taker.await.unwrap();
        first.finish(Duration::from_secs(15)).await;
        assert!(
            matches!(first.end, End::Aborted(_)),
            "{key}: the first client, whose completion was refused, saw {:?}; its replica's log:\n{}",
            first.end,
            frozen.log_text()
        );
        // The key keeps the execution that took it over.
        assert_eq!(taker.end, End::Clean, "{key}");
        assert!(taker.body == upstream.of(key)[1].body(), "{key}");
    }
    assert!(frozen.log_text().contains("lease lost before completion"));
}
