//! Test support: real servers (Redis, Postgres), a counting mock upstream, a proxy that
//! holds back answers, and an in-process gateway.

pub mod app;
pub mod certs;
pub mod grpc;
pub mod holdproxy;
pub mod process;
pub mod raw;
pub mod recorder;
pub mod records;
pub mod sse_upstream;
pub mod upstream;

// Shared with the chaos suite (tests/support).
pub use idemgate_testkit::{attack_upstream, h2wire, postgres, redis};

pub use app::{config, TestApp};
pub use certs::Pki;
pub use holdproxy::HoldProxy;
pub use postgres::PgServer;
pub use process::{serve_process, wait_ready};
pub use raw::{closed_within, read_until_closed};
pub use redis::RedisServer;
pub use sse_upstream::SseUpstream;
pub use upstream::MockUpstream;

/// The lease (and the ttl) of the claims the store-level tests make themselves: longer
/// than any of those tests runs, so that no lease runs out during one.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// An answer read whole: (status, headers, body).
pub type Answer = (u16, reqwest::header::HeaderMap, bytes::Bytes);

/// A keyed JSON POST of `body` to `url` by `client`: `Idempotency-Key: key` and
/// `Content-Type: application/json`; a test adds what else it needs (a tenant, a request
/// id) to what this returns.
pub fn keyed_post(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    key: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(body)
}

/// Sends `request` and reads its answer whole.
pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    read(request.send().await.unwrap()).await
}

/// Reads a response into (status, headers, body).
pub async fn read(r: reqwest::Response) -> Answer {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.bytes().await.unwrap())
}

/// A response's headers in order, without the per-exchange ones (`Date`,
/// `Idempotent-Replayed`, `X-Request-Id`): what a replay must reproduce byte for byte.
pub fn comparable(h: &reqwest::header::HeaderMap) -> Vec<(String, Vec<u8>)> {
    h.iter()
        .filter(|(n, _)| !["date", "idempotent-replayed", "x-request-id"].contains(&n.as_str()))
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect()
}

/// How a burst of identical requests was answered.
#[derive(Debug, Default)]
pub struct Tally {
    pub first: usize,
    pub replayed: usize,
    pub in_flight: usize,
}

/// Counts first executions, replays and 409s; panics on any other answer.
pub fn tally(answers: &[(u16, reqwest::header::HeaderMap, bytes::Bytes)]) -> Tally {
    let mut t = Tally::default();
    for (status, headers, body) in answers {
        let replayed = headers
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap());
        match (*status, replayed) {
            (201, Some("false")) => t.first += 1,
            (201, Some("true")) => t.replayed += 1,
            (409, _) => {
                assert_eq!(problem_code(headers, body), "idempotency_key_in_flight");
                t.in_flight += 1;
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    t
}

/// Retries `f` until it returns true or `within` passes: the one way the tests wait for
/// something to happen. It asks again after 10 ms, then twice as long each time up to
/// every 100 ms: a condition that holds within milliseconds (a request reaching the mock
/// upstream, a row landing) is seen at once, and a long wait asks no more often than
/// every 100 ms (the servers are local, the machine shared).
pub async fn eventually(within: std::time::Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    let mut pause = std::time::Duration::from_millis(10);
    while std::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
    false
}

/// Waits (up to 10 s) until `pg` holds `n` records matching `filter`: what the
/// write-through stores after the answer, or a ttl or lease that ran out as Postgres'
/// clock has it (`expires_at <= now()`).
pub async fn until_rows(pg: &PgServer, filter: &str, n: i64) {
    let within = std::time::Duration::from_secs(10);
    let landed = eventually(within, async || pg.count(filter).await == n).await;
    assert!(landed, "postgres never held {n} records where {filter}");
}

/// How many records `redis` holds completed (state "C": a response stored).
pub async fn completed_records(redis: &RedisServer) -> usize {
    let states = redis.record_states().await;
    states
        .iter()
        .filter(|(_, s)| s.as_deref() == Some("C"))
        .count()
}

/// How many clients of `redis` hold a pattern subscription: one per gateway whose
/// waiters or replay cache listen there (standalone and Sentinel), once subscribed; a
/// gateway dropped in the test process keeps its own.
pub fn pattern_subscribers(redis: &RedisServer) -> usize {
    let clients = redis.cli(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    clients.lines().filter(|l| l.contains(" psub=1 ")).count()
}

/// Waits (up to 5 s) until `n` clients of `redis` hold a pattern subscription.
pub async fn until_subscribed(redis: &RedisServer, n: usize) {
    let within = std::time::Duration::from_secs(5);
    let all = eventually(within, async || pattern_subscribers(redis) >= n).await;
    assert!(all, "{} of {n} subscribed", pattern_subscribers(redis));
}

/// Posts `body` under `key` to `app` until it is answered as a replay
/// (`Idempotent-Replayed: true`) or `within` passes.
pub async fn replays_within(
    app: &TestApp,
    key: &str,
    body: &str,
    within: std::time::Duration,
) -> bool {
    eventually(within, async || {
        let r = app.post(key, body).send().await.unwrap();
        (r.headers().get("idempotent-replayed")).is_some_and(|v| v == "true")
    })
    .await
}

/// The `code` member of a problem+json body, asserting the content type.
pub fn problem_code(headers: &reqwest::header::HeaderMap, body: &[u8]) -> String {
    assert_eq!(
        headers["content-type"], "application/problem+json",
        "not a problem: {body:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    for field in ["type", "title", "status", "detail", "code"] {
        assert!(!v[field].is_null(), "problem lacks {field}: {v}");
    }
    v["code"].as_str().unwrap().to_string()
}

/// Starts Redis, Postgres, the mock upstream and a gateway with `[postgres]` (plus
/// `pg_extra` lines in that section) and `extra` TOML.
pub async fn durable_stack(
    pg_extra: &str,
    extra: &str,
) -> (RedisServer, PgServer, MockUpstream, TestApp) {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let toml = format!("{}{extra}", pg.section(pg_extra));
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &toml)).await;
    (redis, pg, upstream, app)
}

/// Starts Redis, the mock upstream and a gateway configured with `extra` TOML.
pub async fn stack(extra: &str) -> (RedisServer, MockUpstream, TestApp) {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), extra)).await;
    (redis, upstream, app)
}

/// Runs curl with `args`, printing the response head and then `<http_version>
/// <http_code>` (its body goes nowhere).
pub async fn curl_head(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new("curl")
        .args(["-s", "-S", "-D", "-", "-o", "/dev/null"])
        .args(["-w", "%{http_version} %{http_code}"])
        .args(args)
        .output()
        .await
        .expect("curl runs")
}

/// The sum of the samples of `name` (a metric's name, or its name and labels) in the
/// `/metrics` text `text`; 0 when there is none.
pub fn metric(text: &str, name: &str) -> f64 {
    (text.lines())
        .filter_map(|l| l.strip_prefix(name))
        .filter(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
