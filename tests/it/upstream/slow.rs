//! A slow upstream runs once: a keyed request's client is answered 504
//! `upstream_timeout` when the route's `upstream_timeout` passes, but the upstream call
//! goes on under the key's heartbeated lease; retries meanwhile find the key in flight,
//! and once the upstream answers its answer is stored and replayed to every later
//! retry, on any replica, from Redis or (after a flush) Postgres. Past the route's
//! `upstream_deadline` the call is cancelled and its outcome is unknown
//! (`on_ambiguous`). A replica SIGKILLed while it holds such a call is a lease loss like
//! any other. HTTP/1.1 and h2 here; gRPC in `grpc/slow.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use idemgate::Config;
use idemgate_fleet::Replica;

use crate::support::{
    comparable, completed_records, config, eventually, keyed_post, problem_code, read, send,
    serve_process, MockUpstream, PgServer, RedisServer, TestApp,
};

/// The client's wait.
const TIMEOUT: Duration = Duration::from_millis(400);
/// The upstream's: six times the client's, so that a 504 at the client's timeout and
/// an answer at the upstream's stay apart on a loaded machine (a 504 came 1.46 s after
/// the request with 6 tests at once and a build beside them).
const SLOW: Duration = Duration::from_millis(2400);

/// The test route with `upstream_timeout` = [`TIMEOUT`] and the given hard limit.
fn slow_config(
    redis: &RedisServer,
    upstream: &MockUpstream,
    extra: &str,
    deadline: Duration,
) -> Config {
    let mut cfg = config(&redis.url(), &upstream.url(), extra);
    cfg.routes[0].upstream_timeout = TIMEOUT;
    cfg.routes[0].upstream_deadline = deadline;
    cfg
}

/// Retries `key` on `app` as a client told 504 or 409 would, until an answer that is
/// neither (or `within` passes): the answers in order.
async fn retry_until_answered(
    client: &reqwest::Client,
    app: &TestApp,
    key: &str,
    within: Duration,
) -> Vec<(u16, reqwest::header::HeaderMap, bytes::Bytes)> {
    let mut answers = Vec::new();
    eventually(within, async || {
        let answer = send(app.post_by(client, key, AMOUNT)).await;
        let status = answer.0;
        answers.push(answer);
        status != 504 && status != 409
    })
    .await;
    answers
}

/// The body of every request here.
const AMOUNT: &str = "{\"amount\":10}";

/// The first client's 504: `upstream_timeout`, with `Retry-After`, after about
/// [`TIMEOUT`].
async fn first_times_out(client: &reqwest::Client, app: &TestApp, key: &str) {
    let sent = Instant::now();
    let (status, headers, body) = send(app.post_by(client, key, AMOUNT)).await;
    let waited = sent.elapsed();
    assert_eq!(status, 504, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "upstream_timeout");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    assert!(
        waited >= TIMEOUT && waited < SLOW,
        "answered at the client's timeout, not the upstream's answer: {waited:?}"
    );
    assert!(
        !headers.contains_key("idempotency-expires"),
        "nothing is stored yet"
    );
}

/// Checks that the retries of `key` ended in the upstream's one answer, replayed, and
/// that the upstream ran it once.
fn ends_in_the_replay(
    answers: &[(u16, reqwest::header::HeaderMap, bytes::Bytes)],
    upstream: &MockUpstream,
) {
    let (status, headers, _) = answers.last().unwrap();
    assert_eq!(*status, 201, "the retries ended in {answers:?}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert!(headers.contains_key("idempotency-expires"));
    for (status, headers, body) in &answers[..answers.len() - 1] {
        assert_eq!(*status, 409, "{body:?}");
        assert_eq!(problem_code(headers, body), "idempotency_key_in_flight");
    }
    assert_eq!(upstream.executions(), 1, "the slow upstream ran once");
}

#[tokio::test]
async fn a_slow_upstream_runs_once_and_the_timed_out_client_gets_its_answer_on_retry() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(SLOW);
    // A lease shorter than the call: its heartbeat keeps it through the detached call.
    let lease = "[idempotency]\nlock_ttl = \"900ms\"\n";
    let cfg = || slow_config(&redis, &upstream, lease, Duration::from_secs(30));
    let (a, b) = (TestApp::spawn(cfg()).await, TestApp::spawn(cfg()).await);
    let client = reqwest::Client::new();
    first_times_out(&client, &a, "slow-h1").await;
    // Retries alternate between the replicas; the first ones meet the running call.
    let on_b = retry_until_answered(&client, &b, "slow-h1", Duration::from_secs(5)).await;
    assert!(on_b.len() >= 2, "a retry met the call running: {on_b:?}");
    ends_in_the_replay(&on_b, &upstream);
    let (status, headers, body) = send(a.post_by(&client, "slow-h1", AMOUNT)).await;
    let (_, b_headers, b_body) = on_b.last().unwrap();
    assert_eq!(status, 201);
    assert_eq!(
        (comparable(&headers), &body),
        (comparable(b_headers), b_body)
    );
    assert_eq!(upstream.executions(), 1);
    let metrics = a.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("idemgate_upstream_detached_total{")
                && l.contains("outcome=\"stored\"")),
        "{metrics}"
    );
    assert!(metrics.contains("idemgate_upstream_detached_overrun_seconds_count{"));
}

#[tokio::test]
async fn over_h2_a_slow_upstream_runs_once_too() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(SLOW);
    let app = TestApp::spawn(slow_config(&redis, &upstream, "", Duration::from_secs(30))).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    first_times_out(&h2, &app, "slow-h2").await;
    let answers = retry_until_answered(&h2, &app, "slow-h2", Duration::from_secs(5)).await;
    ends_in_the_replay(&answers, &upstream);
}

#[tokio::test]
async fn the_answer_of_a_slow_upstream_is_written_through_and_replays_after_a_redis_flush() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(SLOW);
    let cfg = || slow_config(&redis, &upstream, &pg.section(""), Duration::from_secs(30));
    let (a, b) = (TestApp::spawn(cfg()).await, TestApp::spawn(cfg()).await);
    let client = reqwest::Client::new();
    first_times_out(&client, &a, "slow-pg").await;
    let stored = eventually(Duration::from_secs(5), async || {
        pg.count("state = 'completed'").await == 1
    })
    .await;
    assert!(stored, "the call's answer reached Postgres");
    redis.cli(&["FLUSHALL"]);
    let (status, headers, _) = send(b.post_by(&client, "slow-pg", AMOUNT)).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"true".parse().unwrap())
    );
    assert!(headers.contains_key("idempotency-expires"));
    assert_eq!(
        upstream.executions(),
        1,
        "replayed from Postgres, not run again"
    );
}

#[tokio::test]
async fn past_upstream_deadline_the_call_is_cancelled_and_its_unknown_outcome_stored() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_secs(3));
    let app = TestApp::spawn(slow_config(
        &redis,
        &upstream,
        "",
        Duration::from_millis(900),
    ))
    .await;
    let client = reqwest::Client::new();
    first_times_out(&client, &app, "hard-limit").await;
    // Past the hard limit, the cancelled call stores its unknown outcome.
    let stored = eventually(Duration::from_secs(5), async || {
        completed_records(&redis).await == 1
    });
    assert!(stored.await, "the cancelled call stored nothing");
    let (status, headers, body) = send(app.post_by(&client, "hard-limit", AMOUNT)).await;
    assert_eq!(status, 504, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "upstream_outcome_unknown");
    assert_eq!(
        headers["idempotent-replayed"], "true",
        "stored by the cancelled call"
    );
    let (_, again_headers, again) = send(app.post_by(&client, "hard-limit", AMOUNT)).await;
    assert_eq!(
        (comparable(&again_headers), again),
        (comparable(&headers), body)
    );
    assert_eq!(
        upstream.executions(),
        1,
        "on_ambiguous = \"store\" (the default): never twice"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("idemgate_upstream_detached_total{")
                && l.contains("outcome=\"cancelled\"")),
        "{metrics}"
    );
}

#[tokio::test]
async fn past_upstream_deadline_with_on_ambiguous_release_a_retry_runs_again() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_secs(3));
    let extra = "[routes.idempotency]\non_ambiguous = \"release\"\n";
    let app = TestApp::spawn(slow_config(
        &redis,
        &upstream,
        extra,
        Duration::from_millis(900),
    ))
    .await;
    let client = reqwest::Client::new();
    first_times_out(&client, &app, "hard-release").await;
    // Before the hard limit the key is held; after it, free.
    let (status, _, _) = send(app.post_by(&client, "hard-release", AMOUNT)).await;
    assert_eq!(status, 409);
    let released = async || redis.records().await.is_empty();
    let free = eventually(Duration::from_secs(5), released).await;
    assert!(free, "the key was not released at the hard limit");
    first_times_out(&client, &app, "hard-release").await;
    assert_eq!(
        upstream.executions(),
        2,
        "released at the hard limit: the retry ran again"
    );
}

/// A replica holding a call past its client's timeout is SIGKILLed: its lease is lost
/// like any other (docs/guarantees.md, "A slow upstream"): retries find the key in
/// flight until the lease runs out (`lock_ttl`), then run it again (Redis only, no
/// completer: the documented window of a replica that dies mid-call).
#[tokio::test]
async fn a_sigkilled_replica_holding_a_slow_call_is_a_lease_loss() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_secs(4));
    let dir = tempfile::tempdir().unwrap();
    let lock_ttl = Duration::from_secs(2);
    let mut doomed = replica(dir.path(), &redis, &upstream, lock_ttl).await;
    let client = reqwest::Client::new();
    let (status, _, _) = read(
        keyed_post(
            &client,
            format!("{}/v1/payments", doomed.url()),
            "killed",
            AMOUNT,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        status,
        504,
        "told at upstream_timeout: {}",
        doomed.log_text()
    );
    doomed.kill();
    let killed = Instant::now();
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.idempotency.lock_ttl = lock_ttl;
    let app = TestApp::spawn(cfg).await;
    let (status, _, _) = send(app.post_by(&client, "killed", AMOUNT)).await;
    assert_eq!(status, 409, "the dead replica's lease still holds the key");
    // Its heartbeat stopped with it: the lease ends within lock_ttl of the kill.
    upstream.set_delay(Duration::ZERO);
    let ran = eventually(lock_ttl + Duration::from_secs(2), async || {
        let (status, headers, _) = send(app.post_by(&client, "killed", AMOUNT)).await;
        status == 201 && headers["idempotent-replayed"] == "false"
    })
    .await;
    assert!(ran, "the key is free once the lease ran out");
    // Not sooner: the last heartbeat pushed the lease out by lock_ttl, at most a third
    // of it before the kill.
    assert!(
        killed.elapsed() >= lock_ttl / 2,
        "ran again {:?} after the kill, before its lease could end",
        killed.elapsed()
    );
    assert_eq!(upstream.executions(), 2, "a lease loss: the key ran again");
}

/// An `idemgate serve` process on `redis` with the slow route and `lock_ttl`.
async fn replica(
    dir: &Path,
    redis: &RedisServer,
    up: &MockUpstream,
    lock_ttl: Duration,
) -> Replica {
    let toml = format!(
        "[replay_cache]\nmax_bytes = \"0B\"\n\
         [redis]\nurl = \"{}\"\ncommand_timeout = \"300ms\"\n\
         [idempotency]\nanonymous = \"shared\"\nlock_ttl = \"{}ms\"\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"{}ms\"\n",
        redis.url(),
        lock_ttl.as_millis(),
        up.url(),
        TIMEOUT.as_millis(),
    );
    serve_process(dir, "doomed", &toml).await
}
