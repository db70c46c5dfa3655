//! A replica stopped (SIGTERM) while it holds keyed calls: each is settled before the
//! process exits, within `server.shutdown_grace`, however long the upstream would take
//! and whatever keeps connections open, so that no lease is left to lapse under a call
//! that may have acted. A buffered call still running when only the settling part of
//! the grace is left is cancelled and stored as an unknown outcome (`on_ambiguous`
//! "store", the default): its client gets that answer, and a retry on another replica,
//! after the lease would have run out, replays it instead of running the key again. A
//! duplicate waiting on the stopping replica is answered "in flight" and leaves.

use std::time::{Duration, Instant};

use crate::support::{
    config, eventually, keyed_post, problem_code, send, serve_process, MockUpstream, RedisServer,
    TestApp,
};

const LOCK_TTL: Duration = Duration::from_secs(3);
const GRACE: Duration = Duration::from_secs(4);
const AMOUNT: &str = r#"{"amount":100}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_settles_a_slow_call_and_its_waiter_before_the_replica_exits() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    // Slower than the grace, faster than the route's upstream_timeout.
    upstream.set_delay(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "shutdown_grace = \"{}s\"\n[replay_cache]\nmax_bytes = \"0B\"\n\
         [redis]\nurl = \"{}\"\ncommand_timeout = \"800ms\"\n\
         [idempotency]\nanonymous = \"shared\"\nlock_ttl = \"{}s\"\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"30s\"\n[routes.idempotency]\nin_flight = \"wait\"\n\
         wait_timeout = \"30s\"\n",
        GRACE.as_secs(),
        redis.url(),
        LOCK_TTL.as_secs(),
        upstream.url(),
    );
    let mut stopped = serve_process(dir.path(), "stopped", &toml).await;
    let mut cfg = config(&redis.url(), &upstream.url(), "");
    cfg.idempotency.lock_ttl = LOCK_TTL;
    let survivor = TestApp::spawn(cfg).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/payments", stopped.url());

    let call = tokio::spawn(send(keyed_post(&client, &url, "slow", AMOUNT)));
    let reached = eventually(Duration::from_secs(5), async || upstream.executions() == 1).await;
    assert!(reached, "the call never reached the upstream");
    // A duplicate waits on the same replica.
    let waiter = tokio::spawn(send(keyed_post(&client, &url, "slow", AMOUNT)));
    let waiters = format!("{}:ws", crate::redis::record_key("slow"));
    let waiting = async || redis.cli(&["ZCARD", &waiters]).trim() == "1";
    assert!(
        eventually(Duration::from_secs(5), waiting).await,
        "no waiter"
    );
    stopped.signal("TERM");
    let termed = Instant::now();

    let (status, headers, body) = call.await.unwrap();
    let answered = termed.elapsed();
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (502, "upstream_outcome_unknown"),
        "the stopped call's client; the replica's log:\n{}",
        stopped.log_text()
    );
    assert!(answered < GRACE, "answered {answered:?} after SIGTERM");
    let (status, headers, waited) = waiter.await.unwrap();
    assert_eq!(
        (status, problem_code(&headers, &waited).as_str()),
        (409, "idempotency_key_in_flight"),
        "the waiter on the stopping replica"
    );
    let exited = eventually(GRACE + Duration::from_secs(2), async || !stopped.running()).await;
    assert!(exited, "the replica did not exit within its grace");

    // Past the lease a stop without settling would have left to lapse.
    tokio::time::sleep_until((termed + GRACE + LOCK_TTL).into()).await;
    let (status, headers, retried) = send(survivor.post_by(&client, "slow", AMOUNT)).await;
    assert_eq!(
        upstream.executions(),
        1,
        "the key ran again after the SIGTERM"
    );
    assert_eq!(status, 502);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(retried, body, "the replay is the stopped call's answer");
}
