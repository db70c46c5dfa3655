//! `postgres.redis_fill = "on_replay"` with vouched claims (the default of both): a first execution writes
//! Redis once (its claim, which Redis keeps alone) and Postgres once (its record), so
//! the holder's lease stands in Redis until it runs out. Within it, a retry on any
//! replica is confirmed in Postgres; after it, the lapsed lease is looked up in
//! Postgres before it counts as an unknown outcome, on every vouched replica (a fleet
//! half-way through the switch too), replays and re-warms Redis; if Postgres cannot say,
//! the claim fails closed and the key stays lapsed; past the record's `ttl` the key runs
//! afresh. Concurrent duplicates on two replicas run the key once.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use reqwest::header::HeaderMap;

use super::fill::{completed_in_postgres_alone, deleted_everywhere, record_state};
use super::vouched::{claim_path, fsyncing_redis, leased_rows};
use crate::support::{comparable, config, eventually, metric, read, tally};
use crate::support::{MockUpstream, PgServer, RedisServer, TestApp};

const LOCK_TTL: Duration = Duration::from_millis(1500);

/// Two vouched replicas on one Redis that fsyncs every write and one Postgres, with
/// these `redis_fill` settings ("": the default), `idempotency` lines in their `[idempotency]` (`lock_ttl`
/// is `LOCK_TTL` unless they set it), and `tables` (TOML tables of their own); once
/// both keep claims in Redis alone.
async fn replicas(
    fills: [&str; 2],
    idempotency: &str,
    tables: &str,
) -> (RedisServer, PgServer, MockUpstream, TestApp, TestApp) {
    let redis = fsyncing_redis();
    let pg = PgServer::start();
    let up = MockUpstream::start().await;
    let lock_ttl = match idempotency.contains("lock_ttl") {
        true => String::new(),
        false => format!("lock_ttl = \"{}ms\"\n", LOCK_TTL.as_millis()),
    };
    let toml = |fill: &str| {
        format!(
            "[idempotency]\n{lock_ttl}{idempotency}{tables}{}",
            pg.section(&match fill {
                "" => "claims = \"vouched\"".to_string(),
                fill => format!("claims = \"vouched\"\nredis_fill = \"{fill}\""),
            })
        )
    };
    let a = TestApp::spawn(config(&redis.url(), &up.url(), &toml(fills[0]))).await;
    let b = TestApp::spawn(config(&redis.url(), &up.url(), &toml(fills[1]))).await;
    for app in [&a, &b] {
        let kept = eventually(Duration::from_secs(10), async || {
            claim_path(app).await == "kept_by_redis"
        })
        .await;
        assert!(kept, "redis keeps the claims: {}", claim_path(app).await);
    }
    (redis, pg, up, a, b)
}

async fn post(app: &TestApp, key: &str) -> (u16, HeaderMap, Bytes) {
    read(app.post(key, r#"{"amount":7}"#).send().await.unwrap()).await
}

/// Once the holder's lease ran out, `app` replays the key "k" as `first` answered it
/// (its lapsed lease found completed in Postgres), and Redis holds the record again.
async fn replays_after_the_lease(
    app: &TestApp,
    redis: &RedisServer,
    (status, headers, body): (u16, &HeaderMap, &Bytes),
) {
    tokio::time::sleep(LOCK_TTL + Duration::from_millis(300)).await;
    let (s, h, b) = post(app, "k").await;
    assert_eq!((s, &b, comparable(&h)), (status, body, comparable(headers)));
    assert_eq!(h["idempotent-replayed"], "true");
    let state = record_state(redis).await;
    assert_eq!(state.as_deref(), Some("C"), "re-warmed");
    // The recorder is the test process', shared by the tests that run beside this one.
    let lapsed = "idemgate_fallback_total{reason=\"lapsed_completed\"}";
    assert!(metric(&app.metrics().await, lapsed) >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_execution_writes_no_redis_record_and_every_retry_replays_the_one_answer() {
    // The defaults: vouched claims fill on replay.
    let (redis, pg, up, a, b) = replicas(["", ""], "", "").await;
    let ran = up.executions();
    up.set_delay(Duration::from_millis(300));
    let (s1, h1, b1) = tokio::join!(post(&a, "k"), async {
        up.until_executions(ran + 1).await;
        assert_eq!(
            leased_rows(&pg).await,
            0,
            "the claim is kept by redis alone"
        );
    })
    .0;
    up.set_delay(Duration::ZERO);
    assert_eq!(s1, 201);
    completed_in_postgres_alone(&redis, &pg).await;

    // Within the lease, on the other replica: confirmed in Postgres, the same bytes.
    let (s2, h2, b2) = post(&b, "k").await;
    assert_eq!((s2, &b2, comparable(&h2)), (s1, &b1, comparable(&h1)));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));

    // The lease runs out; the record outlives it as a lapsed lease, which the next claim
    // finds completed in Postgres, replays and re-warms Redis with.
    replays_after_the_lease(&a, &redis, (s1, &h1, &b1)).await;
    let (s4, _, b4) = post(&b, "k").await;
    assert_eq!((s4, &b4), (s1, &b1));
    assert_eq!(up.executions(), ran + 1, "one execution for the key");
}

/// The claim path's concurrency: duplicates that race on two replicas, waiting for the
/// holder, run each key once and all get its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_on_two_replicas_run_once_and_get_one_answer() {
    let wait = "in_flight = \"wait\"\nmax_waiters = 64\nwait_timeout = \"10s\"\n";
    let (redis, pg, up, a, b) = replicas(["on_replay", "on_replay"], wait, "").await;
    let ran = up.executions();
    let delay = Duration::from_millis(400);
    up.set_delay(delay);
    for round in 0..3 {
        let key = format!("hot-{round}");
        let started = Instant::now();
        let answers = join_all((0..24).map(|i| {
            let (app, key) = (if i % 2 == 0 { &a } else { &b }, key.clone());
            async move { post(app, &key).await }
        }))
        .await;
        let took = started.elapsed();
        let t = tally(&answers);
        assert_eq!(
            (t.first, t.replayed, t.in_flight),
            (1, 23, 0),
            "round {round}"
        );
        assert!(
            answers.iter().all(|(_, _, body)| *body == answers[0].2),
            "one answer"
        );
        // The holder's replica wakes its waiters at once, the other at its next re-check.
        assert!(
            took < delay + Duration::from_millis(2500),
            "round {round}: {took:?}"
        );
    }
    assert_eq!(up.executions(), ran + 3, "one execution per key");
    assert_eq!(pg.count("state = 'completed'").await, 3);
    assert_eq!(leased_rows(&pg).await, 0);
    let states = redis.record_states().await;
    assert!(
        states.iter().all(|(_, s)| s.as_deref() == Some("L")),
        "filled on replay: every holder's lease stands: {states:?}"
    );
}

/// Half-way through a switch: a replica completing in Redis confirms a running key in
/// Postgres too, and replays what the other completed there alone while the holder's
/// lease stands; once the lease ran out it looks the lapsed lease up instead of running
/// the key again, even where the route would run a lapsed key again
/// (`on_ambiguous = "release"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_completing_in_redis_replays_what_another_completed_in_postgres_alone() {
    let release = "on_ambiguous = \"release\"\n";
    let (redis, _pg, up, filling, completing) =
        replicas(["on_replay", "at_completion"], release, "").await;
    let ran = up.executions();
    let (s1, h1, b1) = post(&filling, "k").await;
    assert_eq!(s1, 201);
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));
    let (s2, h2, b2) = post(&completing, "k").await;
    assert_eq!((s2, &b2, comparable(&h2)), (s1, &b1, comparable(&h1)));
    assert_eq!(h2["idempotent-replayed"], "true", "confirmed in postgres");
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));

    replays_after_the_lease(&completing, &redis, (s1, &h1, &b1)).await;
    assert_eq!(up.executions(), ran + 1, "not run again");

    // The other way round: completed in Redis and Postgres, replayed by both.
    let (s4, _, b4) = post(&completing, "j").await;
    let (s5, _, b5) = post(&filling, "j").await;
    assert_eq!((s5, &b5), (s4, &b4));
    assert_eq!(up.executions(), ran + 2);
}

/// A lapsed lease Postgres cannot look up fails closed (503, nothing forwarded) and stays
/// lapsed: the retry after Postgres is back replays the one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_postgres_cannot_look_up_fails_closed_and_stays_lapsed() {
    let (redis, mut pg, up, a, _b) = replicas(["on_replay", "on_replay"], "", "").await;
    let ran = up.executions();
    let (s1, h1, b1) = post(&a, "k").await;
    assert_eq!(s1, 201);
    pg.stop();
    tokio::time::sleep(LOCK_TTL + Duration::from_millis(300)).await;
    for _ in 0..2 {
        let (status, _, _) = post(&a, "k").await;
        assert_eq!(status, 503, "postgres cannot say whether it completed");
    }
    assert_eq!(
        record_state(&redis).await.as_deref(),
        Some("L"),
        "still lapsed"
    );
    assert_eq!(up.executions(), ran + 1, "nothing forwarded");
    pg.restart();
    let replayed = eventually(Duration::from_secs(15), async || {
        let (status, headers, body) = post(&a, "k").await;
        status == s1 && body == b1 && comparable(&headers) == comparable(&h1)
    })
    .await;
    assert!(replayed, "replayed once postgres answers");
    assert_eq!(up.executions(), ran + 1);
}

#[tokio::test]
async fn an_admin_invalidation_deletes_the_completed_holders_lease_and_nothing_running() {
    const TOKEN: &str = "admin-token-for-vouched-fill";
    let admin = format!("[admin]\ntoken = \"{TOKEN}\"\n");
    let (redis, pg, up, a, _b) = replicas(["on_replay", "on_replay"], "", &admin).await;
    let ran = up.executions();
    let invalidate = |key: &str| {
        let url = format!("http://{}/admin/keys/payments/{key}", a.admin);
        let request = a.client.delete(url);
        request
            .header("Authorization", format!("Bearer {TOKEN}"))
            .send()
    };
    assert_eq!(post(&a, "k").await.0, 201);
    assert_eq!(record_state(&redis).await.as_deref(), Some("L"));
    deleted_everywhere(read(invalidate("k").await.unwrap()).await, &redis, &pg).await;

    // Running now, under a claim Redis keeps alone: refused without force.
    up.set_delay(Duration::from_millis(800));
    let running = tokio::spawn(a.post("k", r#"{"amount":7}"#).send());
    up.until_executions(ran + 2).await;
    let (status, _, _) = read(invalidate("k").await.unwrap()).await;
    assert_eq!(
        status, 409,
        "a live lease refuses an invalidation without force"
    );
    let (status, _, _) = read(running.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(up.executions(), ran + 2);
}

/// A key completed in Postgres alone and never retried keeps its lapsed lease in Redis
/// past the record's `ttl`; a request after that runs afresh (the record expired), not as
/// an unknown outcome of the lapsed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_past_its_ttl_runs_afresh_though_its_lapsed_lease_stands() {
    // The record expires at its advertised moment (its answer plus 5 s, rounded up to a
    // whole second); the lapsed lease stays until 5 s after the lease, 4 s after the claim.
    let ttl = "lock_ttl = \"4s\"\nttl = \"5s\"\n";
    let (redis, _pg, up, a, _b) = replicas(["on_replay", "on_replay"], ttl, "").await;
    let ran = up.executions();
    let (status, headers, _) = post(&a, "k").await;
    assert_eq!(status, 201);
    let expires = headers["idempotency-expires"].to_str().unwrap();
    let expires = httpdate::parse_http_date(expires).unwrap();
    let left = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(300)).await;
    assert_eq!(
        record_state(&redis).await.as_deref(),
        Some("L"),
        "the lapsed lease outlives the record's ttl"
    );
    let (status, headers, _) = post(&a, "k").await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    assert_eq!(up.executions(), ran + 2, "run afresh");
}
