//! Where Redis and Postgres meet. A Redis that answers with errors is not a
//! Redis that is gone; a lookup that cannot answer fails closed; a record only Postgres
//! holds makes Redis cold on every replica; a Postgres-held lease is acknowledged only
//! once durable; tiers that disagree are counted.

use std::time::{Duration, Instant};

use super::warm_up;
use crate::support::{config, durable_stack, eventually, problem_code, read, replays_within};
use crate::support::{MockUpstream, PgServer, RedisServer, TestApp};

/// Where claims go, as `/readyz` says.
async fn claims_in(app: &TestApp) -> String {
    let body: serde_json::Value = app.readyz().await.json().await.unwrap();
    body["claims_in"].as_str().unwrap_or_default().to_string()
}

/// A full Redis (`OOM` under `noeviction`) answers 503 for the request, and
/// claims stay in Redis: no breaker trip, no move to Postgres, no execution.
#[tokio::test]
async fn a_redis_out_of_memory_answers_503_and_keeps_claims_in_redis() {
    let (redis, pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let (status, headers, body) = read(app.post("oom", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (503, "store_unavailable")
    );
    assert_eq!(upstream.executions(), 0, "nothing forwarded");
    assert_eq!(pg.count("true").await, 0, "no claim moved to postgres");
    assert_eq!(claims_in(&app).await, "redis", "the breaker stays closed");

    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let (status, _, _) = read(app.post("oom", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(upstream.executions(), 1);
}

/// After an outage, a Redis that answers PING but refuses writes (a demoted
/// primary: READONLY) does not get the claims back; the first one that takes writes does.
#[tokio::test]
async fn a_read_only_redis_keeps_the_breaker_open_until_it_takes_writes() {
    let mut redis = RedisServer::start_with(&["--replicaof", "127.0.0.1", "1"]);
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let toml = pg.section("claims = \"redis\"");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml)).await;
    redis.stop();
    assert_eq!(app.post("ro", "{}").send().await.unwrap().status(), 201);
    assert_eq!(claims_in(&app).await, "postgres_or_policy");

    redis.start_again(); // back, but as a replica: PING works, writes do not
    for _ in 0..8 {
        // Real time: nothing may close the breaker for a second of probes.
        tokio::time::sleep(Duration::from_millis(125)).await;
        assert_eq!(
            claims_in(&app).await,
            "postgres_or_policy",
            "a read-only redis must not close the breaker"
        );
    }
    assert_eq!(app.post("ro2", "{}").send().await.unwrap().status(), 201);

    redis.cli(&["REPLICAOF", "NO", "ONE"]);
    let back = eventually(Duration::from_secs(5), async || {
        claims_in(&app).await == "redis"
    })
    .await;
    assert!(back, "claims return once redis takes writes");
    assert_eq!(upstream.executions(), 2);
}

/// Redis lost its data and Postgres cannot be asked: a key that completed must
/// not run again. The claim fails closed (503, key released) until Postgres answers.
#[tokio::test]
async fn a_cold_redis_with_postgres_down_fails_closed() {
    let (redis, mut pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    let (s1, _, b1) = read(app.post("k", r#"{"a":1}"#).send().await.unwrap()).await;
    assert_eq!(s1, 201);
    redis.cli(&["FLUSHALL"]);
    pg.stop();
    let (status, headers, body) = read(app.post("k", r#"{"a":1}"#).send().await.unwrap()).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (503, "store_unavailable"),
        "unknown whether it completed: not forwarded"
    );
    assert_eq!(upstream.executions(), 1);
    assert!(redis.records().await.is_empty(), "the lease was released");

    pg.restart();
    let replayed = replays_within(&app, "k", r#"{"a":1}"#, Duration::from_secs(10)).await;
    assert!(replayed);
    let (_, _, b2) = read(app.post("k", r#"{"a":1}"#).send().await.unwrap()).await;
    assert_eq!(b2, b1);
    assert_eq!(upstream.executions(), 1, "never twice");
}

/// `when_cold`, Redis warm. A completion Redis refuses but Postgres stores leaves
/// Redis without the record while its lease there runs out. A retry on another replica
/// after that must look the key up (and replay), not trust the marker and run it again.
#[tokio::test]
async fn when_cold_a_completion_only_postgres_stored_makes_every_replica_look_up() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let toml = pg.section("lookup_on_miss = \"when_cold\"\nclaims = \"redis\"")
        + "[idempotency]\nlock_ttl = \"1s\"\n";
    let one = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml)).await;
    let two = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml)).await;
    warm_up(&redis).await;
    one.until_policy_read().await;
    two.until_policy_read().await;

    upstream.set_delay(Duration::from_millis(600));
    let first = tokio::spawn(one.post("k", "{}").send());
    upstream.until_executions(1).await;
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]); // completions refused (OOM)
    let (s1, _, b1) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(s1, 201);
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(pg.count("state = 'completed'").await, 1, "postgres has it");
    upstream.set_delay(Duration::ZERO);

    // The first replica's lease in Redis runs out (lock_ttl 1 s); retry on the other.
    let gone = eventually(Duration::from_secs(5), async || {
        redis.records().await.is_empty()
    })
    .await;
    assert!(gone, "the lease ran out");
    let (s2, h2, b2) = read(two.post("k", "{}").send().await.unwrap()).await;
    assert_eq!(s2, 201);
    assert_eq!(
        h2["idempotent-replayed"], "true",
        "looked up, not run again"
    );
    assert_eq!(b2, b1);
    assert_eq!(upstream.executions(), 1);
}

/// A lease held in Postgres (Redis away) is acknowledged only once its record
/// is durable: a Postgres blip during the call delays the answer, it does not leave
/// the record in a queue while the client is told it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_held_lease_is_answered_only_once_durable() {
    let (mut redis, pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    redis.stop();
    // Claims move to Postgres (the breaker opens on this first one).
    assert_eq!(app.post("before", "{}").send().await.unwrap().status(), 201);
    upstream.set_delay(Duration::from_millis(800));
    let pg = std::sync::Arc::new(std::sync::Mutex::new(pg));
    let request = tokio::spawn(app.post("pgheld", "{}").send());
    upstream.until_executions(2).await;
    let outage = pg.clone();
    let back = tokio::task::spawn_blocking(move || {
        let mut pg = outage.lock().unwrap();
        pg.stop();
        std::thread::sleep(Duration::from_secs(3)); // real time: an outage outlasting the call
        pg.restart();
        Instant::now()
    });
    let response = request.await.unwrap().unwrap();
    let answered = Instant::now();
    let back = back.await.unwrap();
    assert_eq!(response.status(), 201);
    assert!(
        answered + Duration::from_millis(100) >= back,
        "answered {:?} before postgres was back",
        back - answered
    );
    let pg = std::sync::Arc::into_inner(pg)
        .unwrap()
        .into_inner()
        .unwrap();
    assert_eq!(
        pg.count("state = 'completed'").await,
        2,
        "both keys durable"
    );
    assert_eq!(upstream.executions(), 2);
}

/// With claims in Redis, a completion stored in Redis that Postgres refuses
/// because it holds another record for the key is logged and counted.
#[tokio::test]
async fn tiers_that_disagree_are_counted() {
    let (mut redis, _pg, upstream, app) =
        durable_stack("lookup_on_miss = \"when_cold\"\nclaims = \"redis\"", "").await;
    redis.stop();
    assert_eq!(app.post("split", "{}").send().await.unwrap().status(), 201);
    redis.start_again();
    let back = eventually(Duration::from_secs(5), async || {
        claims_in(&app).await == "redis"
    })
    .await;
    assert!(back);
    // Someone vouches for a Redis that lacks the record (say, a restored marker).
    warm_up(&redis).await;
    app.until_policy_read().await;
    let (status, headers, _) = read(app.post("split", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    assert_eq!(upstream.executions(), 2);

    let metrics = app.metrics().await;
    let counted = metrics.lines().any(|l| {
        l.starts_with(
            "idemgate_tier_disagreements_total{kind=\"stored_in_redis_conflict_in_postgres\"}",
        ) && !l.ends_with(" 0")
    });
    assert!(counted, "counted in /metrics");
}

/// With claims written through, Postgres decides who holds a key, so a completion is
/// written to both tiers at once: a Redis that stops taking writes while the upstream
/// answers does not hold the durable copy back, and the answer waits for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_written_through_completion_reaches_postgres_while_redis_takes_no_writes() {
    let (redis, pg, upstream, app) = durable_stack("claims = \"write_through\"", "").await;
    upstream.set_delay(Duration::from_millis(500));
    let started = Instant::now();
    let first = tokio::spawn(app.post("both-tiers", "{}").send());
    upstream.until_executions(1).await;
    redis.cli(&["CLIENT", "PAUSE", "2500", "WRITE"]);
    let in_postgres = eventually(Duration::from_millis(1500), async || {
        pg.count("state = 'completed'").await == 1
    })
    .await;
    assert!(
        in_postgres,
        "postgres took the record while redis took no writes ({:?} in)",
        started.elapsed()
    );
    let (status, _, body) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    redis.cli(&["CLIENT", "UNPAUSE"]);
    let replayed = replays_within(&app, "both-tiers", "{}", Duration::from_secs(5)).await;
    assert!(replayed, "a retry is a replay");
    let (_, _, again) = read(app.post("both-tiers", "{}").send().await.unwrap()).await;
    assert_eq!(again, body, "the stored answer, byte for byte");
    assert_eq!(upstream.executions(), 1);
}
