//! A Postgres host that stops answering instead of refusing (powered off, cut off:
//! every packet reaching it dropped by the launcher's `NetLab::power_off`), in a
//! multi-host `postgres.url` and alone. The silent server runs in a namespace of the
//! lab, the other one on loopback; the gateway runs in this process. Skipped, saying
//! why, where network namespaces or nftables are missing.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use idemgate::config::PostgresConfig;
use idemgate::testing::store::PgStore;
use idemgate_fleet::{Host, NetLab};

use super::{sql, READ_ONLY, WRITABLE};
use crate::support::{config, problem_code, read, MockUpstream, PgServer, RedisServer, TestApp};

/// `postgres.connect_timeout` here; the statement timeout is 1 s (the client gives up
/// on a statement after 1.25 s).
const CONNECT: Duration = Duration::from_secs(3);
const STATEMENT: Duration = Duration::from_secs(1);

/// A lab with one host for a server to go silent, or `None` (said) where none can be made.
fn lab() -> Option<(NetLab, Host)> {
    if let Some(why) = NetLab::unavailable() {
        eprintln!("skipped: {why}");
        return None;
    }
    let lab = NetLab::new().unwrap();
    let host = lab.host("pgsilent").unwrap();
    Some((lab, host))
}

/// libpq key=value pairs naming `servers` in that order, writable ones only, and `extra`.
fn url(servers: &[&PgServer], extra: &str) -> String {
    let hosts: Vec<String> = servers.iter().map(|s| s.host.ip.to_string()).collect();
    let ports: Vec<String> = servers.iter().map(|s| s.port.to_string()).collect();
    format!(
        "host={} port={} dbname=postgres user=postgres sslmode=disable \
         target_session_attrs=read-write {extra}",
        hosts.join(","),
        ports.join(",")
    )
}

fn section(url: &str, extra: &str) -> String {
    format!(
        "[postgres]\nurl = \"{url}\"\nstatement_timeout = \"1s\"\nconnect_timeout = \"3s\"\n{extra}\n"
    )
}

/// One keyed request: its status and how long it took. Anything but a 201 must be the
/// 503 of a store that cannot take the claim now.
async fn attempt(app: &TestApp, key: &str) -> (u16, Duration) {
    let started = Instant::now();
    let (status, headers, body) = read(app.post(key, "{}").send().await.unwrap()).await;
    let took = started.elapsed();
    if status != 201 {
        assert_eq!(status, 503, "{key}: {}", String::from_utf8_lossy(&body));
        assert_eq!(problem_code(&headers, &body), "store_unavailable");
        assert!(headers.contains_key("retry-after"));
    }
    (status, took)
}

/// `n` keyed requests at once (`prefix-0`...): how each was answered.
async fn burst(app: &TestApp, prefix: &str, n: usize) -> Vec<(u16, Duration)> {
    let sent = (0..n).map(|i| {
        let key = format!("{prefix}-{i}");
        async move { attempt(app, &key).await }
    });
    join_all(sent).await
}

/// Sends `key` until it is served, for at most `within`; every attempt.
async fn until_served(app: &TestApp, key: &str, within: Duration) -> Vec<(u16, Duration)> {
    let deadline = Instant::now() + within;
    let mut attempts = Vec::new();
    loop {
        let (status, took) = attempt(app, key).await;
        attempts.push((status, took));
        if status == 201 {
            return attempts;
        }
        assert!(
            Instant::now() < deadline,
            "{key} never served: {attempts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sessions the gateway holds on `pg`, ended by the server (the pool must reconnect).
async fn end_sessions(pg: &PgServer) {
    let sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
               WHERE application_name = 'idemgate'";
    pg.client().await.execute(sql, &[]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The silent host listed first: the gateway starts (its first connection passes the
/// host over after the connect timeout), and no request after the first success pays
/// for it, though every round starts with all of the pool's sessions ended by the
/// server, so each reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_first_host_is_passed_over_at_start_and_on_every_reconnect() {
    let Some((lab, host)) = lab() else { return };
    let (silent, live) = (PgServer::start_on(&host), PgServer::start());
    lab.power_off(&host).unwrap();
    let (redis, upstream) = (RedisServer::start(), MockUpstream::start().await);

    let started = Instant::now();
    let text = section(&url(&[&silent, &live], ""), "pool_size = 8");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &text)).await;
    let (status, _) = attempt(&app, "first").await;
    let to_first = started.elapsed();
    assert_eq!(status, 201);
    assert!(
        to_first >= CONNECT - Duration::from_millis(100),
        "the silent host is tried first, for its connect timeout: {to_first:?}"
    );
    assert!(
        to_first < CONNECT + Duration::from_secs(4),
        "served within seconds of the start: {to_first:?}"
    );

    let mut slowest = Duration::ZERO;
    for round in 0..5 {
        end_sessions(&live).await;
        for (status, took) in burst(&app, &format!("r{round}"), 8).await {
            assert_eq!(status, 201, "round {round}");
            slowest = slowest.max(took);
        }
    }
    assert!(
        slowest < CONNECT / 3,
        "a request after the first paid for the silent host: {slowest:?}"
    );
    assert_eq!(
        live.count("true").await,
        41,
        "every key claimed on the live host"
    );
    assert_eq!(upstream.executions(), 41);
}

/// `connect_timeout` in the URL (libpq's, in seconds) wins over the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_urls_own_connect_timeout_wins_over_the_setting() {
    let Some((lab, host)) = lab() else { return };
    let (silent, live) = (PgServer::start_on(&host), PgServer::start());
    lab.power_off(&host).unwrap();
    let url = url(&[&silent, &live], "connect_timeout=1");
    let store = PgStore::new(&PostgresConfig {
        url: url.clone(),
        connect_timeout: Duration::from_secs(30),
        ..PostgresConfig::default()
    })
    .unwrap();
    assert_eq!(store.connect_timeout(), Duration::from_secs(1));

    let (redis, upstream) = (RedisServer::start(), MockUpstream::start().await);
    let text = format!("[postgres]\nurl = \"{url}\"\nconnect_timeout = \"30s\"\n");
    let started = Instant::now();
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &text)).await;
    assert_eq!(attempt(&app, "first").await.0, 201);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "one second for the silent host, then served: {took:?}"
    );
}

/// The primary goes silent mid-run (the standby is made writable as a failover would):
/// the statement in flight on it times out, and no later request waits that long again:
/// the pool's other sessions to it are dropped, not tried one request at a time, and
/// new connections go to the other host first. No key runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_gone_silent_costs_one_statement_timeout_then_the_next_host_serves() {
    let Some((lab, host)) = lab() else { return };
    let (a, b) = (PgServer::start_on(&host), PgServer::start());
    for pg in [&a, &b] {
        let config = PostgresConfig {
            url: pg.url(),
            ..PostgresConfig::default()
        };
        PgStore::new(&config).unwrap().migrate().await.unwrap();
    }
    sql(&b, READ_ONLY).await;
    let (redis, upstream) = (RedisServer::start(), MockUpstream::start().await);
    let text = section(&url(&[&a, &b], ""), "pool_size = 4");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &text)).await;

    // Several requests at once, so that the pool holds several sessions to A.
    for (status, _) in burst(&app, "warm", 8).await {
        assert_eq!(status, 201);
    }
    let written = crate::support::eventually(Duration::from_secs(5), async || {
        a.count("state = 'completed'").await == 8
    });
    assert!(written.await, "the warm-up's records reached A");

    lab.power_off(&host).unwrap();
    sql(&b, WRITABLE).await;
    let mut attempts = Vec::new();
    for i in 0..20 {
        attempts.extend(until_served(&app, &format!("after-{i}"), Duration::from_secs(15)).await);
    }
    let slow = attempts
        .iter()
        .filter(|(_, took)| *took >= STATEMENT)
        .count();
    assert!(
        slow <= 1,
        "more than one request waited for the silent host: {attempts:?}"
    );
    let served = attempts
        .iter()
        .position(|(status, _)| *status == 201)
        .unwrap();
    assert!(
        (attempts[served..].iter()).all(|(_, took)| *took < STATEMENT / 2),
        "once the next host served, a request waited: {attempts:?}"
    );
    assert_eq!(b.count("true").await, 20, "every new key claimed on B");
    assert_eq!(upstream.executions(), 28, "no key ran twice");
}

/// The only host goes silent: one statement times out, then keyed requests fail at
/// once (503, nothing forwarded) while the host is tried again in the background,
/// readiness says Postgres is down without waiting, and once the host answers again
/// requests are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_silent_host_fails_requests_fast_and_is_found_again_when_it_answers() {
    let Some((lab, host)) = lab() else { return };
    let pg = PgServer::start_on(&host);
    let (redis, upstream) = (RedisServer::start(), MockUpstream::start().await);
    let text = section(&url(&[&pg], ""), "pool_size = 4");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &text)).await;
    for (status, _) in burst(&app, "warm", 4).await {
        assert_eq!(status, 201);
    }

    lab.power_off(&host).unwrap();
    let mut attempts = Vec::new();
    for i in 0..12 {
        attempts.push(attempt(&app, &format!("silent-{i}")).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        attempts.iter().all(|(status, _)| *status == 503),
        "{attempts:?}"
    );
    let slow = attempts
        .iter()
        .filter(|(_, took)| *took >= STATEMENT)
        .count();
    assert!(
        slow <= 1,
        "more than one request waited for the silent host: {attempts:?}"
    );
    let started = Instant::now();
    let ready = app.readyz().await;
    assert!(
        started.elapsed() < STATEMENT,
        "readiness waited on the silent host"
    );
    assert_eq!(ready.status(), 200);
    let ready: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(ready["down"], serde_json::json!(["postgres"]));

    lab.heal().unwrap();
    let back = Instant::now();
    until_served(&app, "back", Duration::from_secs(15)).await;
    assert!(
        back.elapsed() < CONNECT * 2,
        "found again within a walk or two: {:?}",
        back.elapsed()
    );
    assert_eq!(
        upstream.executions(),
        5,
        "nothing forwarded while Postgres was silent"
    );
}
