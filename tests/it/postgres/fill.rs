//! `postgres.redis_fill = "on_replay"` with write-through claims (with vouched claims,
//! where it is the default: `vouched_fill.rs`): a first execution completes in Postgres only,
//! so Redis keeps the holder's lease until it runs out. A retry meanwhile, on any
//! replica, is confirmed in Postgres and replays the stored bytes; the first claim
//! after the lease ran out re-warms Redis; duplicates that wait on either replica get
//! the one execution's answer; an admin invalidation deletes what Postgres decided; a
//! completion Postgres cannot take at once goes to Redis as without `on_replay`. A
//! fleet turning it on replica by replica (some replicas on `"at_completion"`) keeps
//! all of that: every replica with write-through claims confirms Redis' "in flight".

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::support::{comparable, config, eventually, metric, read, replays_within, tally};
use crate::support::{MockUpstream, PgServer, RedisServer, TestApp};

/// Two replicas on one Redis and one Postgres, write-through claims, Redis filled on
/// replay, with `extra` TOML (after `[postgres]`).
async fn two_replicas(extra: &str) -> (RedisServer, PgServer, MockUpstream, TestApp, TestApp) {
    replicas_filling(["on_replay", "on_replay"], extra).await
}

/// Two replicas with these `redis_fill` settings, in that order.
async fn replicas_filling(
    fills: [&str; 2],
    extra: &str,
) -> (RedisServer, PgServer, MockUpstream, TestApp, TestApp) {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let toml = |fill: &str| {
        format!(
            "{}{extra}",
            pg.section(&format!(
                "claims = \"write_through\"\nredis_fill = \"{fill}\""
            ))
        )
    };
    let a = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml(fills[0]))).await;
    let b = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml(fills[1]))).await;
    (redis, pg, upstream, a, b)
}

/// An admin invalidation's `answer` deleted the record in both tiers, the holder's
/// lease that still stood in Redis too.
pub(super) async fn deleted_everywhere(
    (status, _, body): (u16, reqwest::header::HeaderMap, bytes::Bytes),
    redis: &RedisServer,
    pg: &PgServer,
) {
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let both = serde_json::json!({"redis": true, "postgres": true});
    assert_eq!(v["deleted"], both);
    let records = redis.records().await;
    assert!(
        records.is_empty(),
        "the holder's lease went too: {records:?}"
    );
    assert_eq!(pg.count("true").await, 0);
}

/// The one record was stored in Postgres before its answer, and its completion did not
/// write Redis: the holder's lease stands there.
pub(super) async fn completed_in_postgres_alone(redis: &RedisServer, pg: &PgServer) {
    let completed = pg.count("state = 'completed'").await;
    assert_eq!(completed, 1, "stored before the answer");
    let state = record_state(redis).await;
    assert_eq!(
        state.as_deref(),
        Some("L"),
        "the holder's lease stands in redis"
    );
}

/// The state (`s`) of the only record key in Redis.
pub(super) async fn record_state(redis: &RedisServer) -> Option<String> {
    let states = redis.record_states().await;
    assert_eq!(states.len(), 1, "one record key: {states:?}");
    states.into_iter().next().and_then(|(_, s)| s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_while_the_lease_stands_replays_from_postgres_and_redis_is_warmed_later() {
    let lease = "[idempotency]\nlock_ttl = \"4s\"\n";
    let (redis, pg, upstream, a, b) = two_replicas(lease).await;
    let (s1, h1, b1) = read(a.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!(s1, 201);
    completed_in_postgres_alone(&redis, &pg).await;

    // On the other replica, within the lease: confirmed in Postgres, the same bytes.
    let (s2, h2, b2) = read(b.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!((s2, &b2), (s1, &b1));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(comparable(&h2), comparable(&h1));
    // A different body is still refused, lease or not.
    let other = b.post("k", r#"{"amount":8}"#).send().await.unwrap();
    assert_eq!(other.status(), 422);
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));

    // The lease runs out (real time: its ttl in Redis); the next claim finds the record in
    // Postgres and re-warms Redis.
    tokio::time::sleep(Duration::from_millis(4200)).await;
    let (s3, h3, b3) = read(a.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!((s3, &b3), (s1, &b1));
    assert_eq!(comparable(&h3), comparable(&h1));
    assert_eq!(
        record_state(&redis).await.as_deref(),
        Some("C"),
        "re-warmed"
    );
    let (s4, _, b4) = read(b.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!((s4, &b4), (s1, &b1));
    assert_eq!(upstream.executions(), 1, "one execution for the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_on_two_replicas_run_once_and_waiters_get_the_answer() {
    let wait = "[idempotency]\nin_flight = \"wait\"\nmax_waiters = 64\nwait_timeout = \"10s\"\n";
    let (redis, pg, upstream, a, b) = two_replicas(wait).await;
    let delay = Duration::from_millis(400);
    upstream.set_delay(delay);
    for round in 0..3 {
        let key = format!("hot-{round}");
        let started = Instant::now();
        let answers = join_all((0..24).map(|i| {
            let (app, key) = (if i % 2 == 0 { &a } else { &b }, key.clone());
            async move { read(app.post(&key, r#"{"amount":1}"#).send().await.unwrap()).await }
        }))
        .await;
        let took = started.elapsed();
        let t = tally(&answers);
        assert_eq!(
            (t.first, t.replayed, t.in_flight),
            (1, 23, 0),
            "round {round}"
        );
        let first = &answers[0].2;
        assert!(
            answers.iter().all(|(_, _, body)| body == first),
            "one answer"
        );
        // Waiters on the holder's replica are woken at once, the others at their next
        // re-check: within a second of the completion, not at wait_timeout.
        assert!(
            took < delay + Duration::from_millis(2500),
            "round {round}: {took:?}"
        );
    }
    assert_eq!(upstream.executions(), 3, "one execution per key");
    assert_eq!(pg.count("state = 'completed'").await, 3);
    // Filled on replay indeed: every holder's lease still stands in Redis, and the
    // duplicates' answers came from Postgres.
    let states = redis.record_states().await;
    assert_eq!(states.len(), 3, "{states:?}");
    assert!(
        states.iter().all(|(_, s)| s.as_deref() == Some("L")),
        "{states:?}"
    );
    let confirmed = |text: &str| {
        metric(
            text,
            "idemgate_fallback_total{reason=\"in_flight_completed\"}",
        )
    };
    let both = confirmed(&a.metrics().await) + confirmed(&b.metrics().await);
    assert!(both >= 1.0, "duplicates replayed from postgres: {both}");
}

#[tokio::test]
async fn an_admin_invalidation_within_the_lease_deletes_the_record_everywhere() {
    const TOKEN: &str = "admin-token-for-fill";
    let admin = format!("[admin]\ntoken = \"{TOKEN}\"\n");
    let (redis, pg, upstream, a, _b) = two_replicas(&admin).await;
    assert_eq!(a.post("k", "{}").send().await.unwrap().status(), 201);
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));
    let url = format!("http://{}/admin/keys/payments/k", a.admin);
    let r = (a
        .client
        .delete(url)
        .header("Authorization", format!("Bearer {TOKEN}")))
    .send()
    .await
    .unwrap();
    deleted_everywhere(read(r).await, &redis, &pg).await;
    // Invalidated: the key runs again.
    let (status, headers, _) = read(a.post("k", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_postgres_cannot_take_goes_to_redis_and_replays() {
    let (mut redis, mut pg, upstream, a, b) = two_replicas("").await;
    upstream.set_delay(Duration::from_millis(800));
    let first = tokio::spawn(a.post("k", r#"{"amount":3}"#).send());
    // The claim is committed in Postgres before the call goes out.
    let claimed = eventually(Duration::from_secs(5), async || upstream.executions() == 1).await;
    assert!(claimed);
    pg.stop();
    let (s1, h1, b1) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(s1, 201, "the client still gets its response");
    assert_eq!(
        record_state(&redis).await.as_deref(),
        Some("C"),
        "stored in redis"
    );
    let (s2, h2, b2) = read(b.post("k", r#"{"amount":3}"#).send().await.unwrap()).await;
    assert_eq!((s2, &b2, comparable(&h2)), (s1, &b1, comparable(&h1)));
    assert_eq!(h2["idempotent-replayed"], "true");
    // The queued copy lands once Postgres returns: it is the durable one.
    pg.restart();
    let landed = eventually(Duration::from_secs(15), async || {
        pg.count("state = 'completed'").await == 1
    })
    .await;
    assert!(landed, "the queued copy reached postgres");
    redis.restart();
    let replayed = replays_within(&b, "k", r#"{"amount":3}"#, Duration::from_secs(10)).await;
    assert!(replayed, "replayed from postgres after redis lost it");
    assert_eq!(upstream.executions(), 1);
}

/// The rollout of `on_replay`, replica by replica: a replica still on `"at_completion"`
/// beside one filling on replay replays what the other completed in Postgres only (a
/// retry within the lease, and duplicates waiting on it), and the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_half_way_through_turning_on_replay_on_replays_across_both_settings() {
    let wait = "[idempotency]\nin_flight = \"wait\"\nwait_timeout = \"10s\"\nlock_ttl = \"30s\"\n";
    let (redis, _pg, upstream, filling, completing) =
        replicas_filling(["on_replay", "at_completion"], wait).await;

    // Completed in Postgres only by the replica filling on replay; the lease stands.
    let (s1, h1, b1) = read(filling.post("k", r#"{"amount":5}"#).send().await.unwrap()).await;
    assert_eq!(s1, 201);
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));
    // A retry on the replica completing in Redis: confirmed in Postgres at once, not
    // held until the 30 s lease runs out.
    let started = Instant::now();
    let (s2, h2, b2) = read(
        completing
            .post("k", r#"{"amount":5}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s2, &b2, comparable(&h2)), (s1, &b1, comparable(&h1)));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // Duplicates waiting on either setting for an execution on either: one execution,
    // every waiter answered within a re-check of the completion.
    let delay = Duration::from_millis(400);
    upstream.set_delay(delay);
    for (round, holder_first) in [(0, true), (1, false)] {
        let key = format!("wait-{round}");
        let (holder, other) = if holder_first {
            (&filling, &completing)
        } else {
            (&completing, &filling)
        };
        let started = Instant::now();
        let first = tokio::spawn(holder.post(&key, "{}").send());
        assert!(
            eventually(Duration::from_secs(5), async || upstream.executions()
                == 2 + round)
            .await
        );
        let waiters = join_all(
            (0..6).map(|_| async { read(other.post(&key, "{}").send().await.unwrap()).await }),
        )
        .await;
        let (s, _, body) = read(first.await.unwrap().unwrap()).await;
        assert_eq!(s, 201);
        let t = tally(&waiters);
        assert_eq!((t.replayed, t.in_flight), (6, 0), "round {round}: {t:?}");
        assert!(waiters.iter().all(|(_, _, b)| *b == body), "round {round}");
        let took = started.elapsed();
        assert!(
            took < delay + Duration::from_millis(2500),
            "round {round}: {took:?}"
        );
    }
    assert_eq!(upstream.executions(), 3, "one execution per key");
}
