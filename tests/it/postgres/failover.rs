//! The gateway's side of Postgres high availability: libpq key=value connection strings
//! with several hosts, writes following the primary when the one in use turns read-only
//! (as a demoted primary does), and readiness while Postgres is down.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idemgate::config::PostgresConfig;
use idemgate::testing::store::PgStore;
use idemgate_fleet::free_port;

use super::{sql, READ_ONLY, WRITABLE};
use crate::support::process::{config_file, until_ready, BIN};
use crate::support::{
    config, eventually, keyed_post, problem_code, read, send, Answer, MockUpstream, PgServer,
    RedisServer, TestApp,
};

/// A libpq key=value `postgres.url` for the loopback servers on `ports`, tried in order.
fn key_value_url(ports: &[u16], extra: &str) -> String {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let hosts = vec!["127.0.0.1"; ports.len()].join(",");
    format!(
        "host={hosts} port={} dbname=postgres user=postgres sslmode=disable {extra}",
        ports.join(",")
    )
}

/// The value of the sample `series` (name and labels, exactly) in `metrics`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn primary_series(port: u16) -> String {
    format!("idemgate_postgres_primary_info{{host=\"127.0.0.1:{port}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_value_url_whose_first_host_is_closed_serves_and_replays() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let url = key_value_url(&[free_port(), pg.port], "password='not checked'");
    let section = format!("[postgres]\nurl = \"{url}\"\nstatement_timeout = \"1s\"\n");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &section)).await;

    let (status, _, body) = read(app.post("kv-1", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    let (status, headers, again) = read(app.post("kv-1", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, body);
    assert_eq!(upstream.executions(), 1);
    assert_eq!(
        pg.count("true").await,
        1,
        "the claim and record are in Postgres"
    );
    let metrics = app.metrics().await;
    assert_eq!(sample(&metrics, &primary_series(pg.port)), Some(1.0));
}

#[test]
fn check_config_takes_key_value_urls_hides_their_password_and_warns_on_any_host() {
    let url = key_value_url(&[5432, 5433], "password='hunter2 x'");
    let file = config_file(&format!(
        "[postgres]\nurl = \"{url}\"\n[[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\n\
         upstream = \"http://127.0.0.1:3000\"\n"
    ));
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
    assert!(stdout.contains("password=***"), "{stdout}");
    assert!(stdout.contains("host=127.0.0.1,127.0.0.1 port=5432,5433"));
    let warning = "postgres.url lists several hosts without target_session_attrs=read-write";
    assert!(stderr.contains(warning), "{stderr}");

    let file = config_file(&format!(
        "[postgres]\nurl = \"{}\"\n",
        key_value_url(&[5432, 5433], "target_session_attrs=read-write")
    ));
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(warning), "{stderr}");

    for (text, named) in [
        (
            "[postgres]\nurl = \"not a connection string\"\n",
            "postgres.url",
        ),
        (
            "[postgres]\nurl = \"host=h password=x\"\npassword_file = \"/dev/null\"\n",
            "postgres.password_file",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["check-config", "--config"])
            .arg(config_file(text).path())
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(named), "{named} not named: {stderr}");
    }
}

/// Two migrated servers: A writable (the primary), B read-only (as a standby answers).
async fn primary_and_standby() -> (PgServer, PgServer) {
    let (a, b) = (PgServer::start(), PgServer::start());
    for pg in [&a, &b] {
        let store = PgStore::new(&PostgresConfig {
            url: pg.url(),
            ..PostgresConfig::default()
        })
        .unwrap();
        store.migrate().await.unwrap();
    }
    sql(&b, READ_ONLY).await;
    (a, b)
}

/// Two servers, both migrated; B read-only. The gateway writes to A; then A turns
/// read-only and B writable (as in a switchover): within a few refused requests
/// (503, nothing forwarded) new keys are served from B, and no key runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_the_primary_when_the_old_one_turns_read_only() {
    let (a, b) = primary_and_standby().await;
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let url = key_value_url(&[a.port, b.port], "target_session_attrs=read-write");
    // The two servers share no data (no replication between them): the keys completed on
    // A replay from the copy Redis takes at completion. (Filled on replay, the default,
    // Postgres holds a record's one copy: a commit a failover loses is lost.)
    let section = format!(
        "[postgres]\nurl = \"{url}\"\nstatement_timeout = \"1s\"\npool_size = 4\n\
         redis_fill = \"at_completion\"\n"
    );
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &section)).await;

    assert_eq!(app.post("on-a", "{}").send().await.unwrap().status(), 201);
    // Several requests at once, so that the pool holds several connections to A.
    let warm = (0..8).map(|i| app.post(&format!("warm-{i}"), "{}").send());
    for response in futures_util::future::join_all(warm).await {
        assert_eq!(response.unwrap().status(), 201);
    }
    assert_eq!(a.count("true").await, 9);
    let metrics = app.metrics().await;
    assert_eq!(sample(&metrics, &primary_series(a.port)), Some(1.0));
    let failovers = |m: &str| sample(m, "idemgate_postgres_failovers_total").unwrap_or(0.0);
    let failovers_before = failovers(&metrics);

    sql(&a, READ_ONLY).await;
    sql(&b, WRITABLE).await;
    let (mut served, mut refused) = (0, 0);
    for i in 0..10 {
        let key = format!("after-{i}");
        let started = Instant::now();
        loop {
            let (status, headers, body) = read(app.post(&key, "{}").send().await.unwrap()).await;
            if status == 201 {
                served += 1;
                break;
            }
            assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
            assert_eq!(problem_code(&headers, &body), "store_unavailable");
            assert!(headers.contains_key("retry-after"));
            refused += 1;
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{key} never served"
            );
        }
    }
    assert_eq!(served, 10);
    // The request that met the read-only server is refused; the pool's other
    // connections to A are dropped with that one, not tried one request at a time.
    assert!(
        refused <= 2,
        "{refused} requests refused before B took over"
    );
    assert_eq!(
        upstream.executions(),
        19,
        "a refused claim forwards nothing"
    );
    assert_eq!(b.count("true").await, 10, "every new key was written to B");
    assert_eq!(a.count("true").await, 9);

    // Replays of every key, the old one included, and none runs again.
    for key in ["on-a", "warm-3", "after-0", "after-9"] {
        let response = app.post(key, "{}").send().await.unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(upstream.executions(), 19);
    let metrics = app.metrics().await;
    assert_eq!(sample(&metrics, &primary_series(b.port)), Some(1.0));
    assert_eq!(sample(&metrics, &primary_series(a.port)), Some(0.0));
    assert!(
        failovers(&metrics) > failovers_before,
        "the failover was counted"
    );
}

/// A request in flight when its server turns read-only: its claim was committed on A;
/// its completion meets A read-only (25006) and waits in the write-through retry queue,
/// which writes it to B once the pool has reconnected. The client gets its response,
/// and with Redis emptied the replay comes from B; the key ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_meets_the_old_primary_read_only_lands_on_the_new_one() {
    let (a, b) = primary_and_standby().await;
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let url = key_value_url(&[a.port, b.port], "target_session_attrs=read-write");
    let section = format!("[postgres]\nurl = \"{url}\"\nstatement_timeout = \"1s\"\n");
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), &section)).await;
    assert_eq!(app.post("warm", "{}").send().await.unwrap().status(), 201);

    upstream.set_delay(Duration::from_millis(600));
    let in_flight = tokio::spawn(app.post("in-flight", "{}").send());
    upstream.until_executions(2).await;
    assert_eq!(a.count("state = 'leased'").await, 1, "claimed on A");
    sql(&a, READ_ONLY).await;
    sql(&b, WRITABLE).await;
    let (status, _, body) = read(in_flight.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    upstream.set_delay(Duration::ZERO);

    let landed = eventually(Duration::from_secs(10), async || {
        // New requests meet A read-only and move the pool to B.
        b.count("state = 'completed'").await > 0 || {
            let _ = app.post("nudge", "{}").send().await.unwrap();
            false
        }
    });
    assert!(landed.await, "the completion never reached B");
    redis.cli(&["FLUSHALL"]);
    let (status, headers, again) = read(app.post("in-flight", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, body);
    assert_eq!(
        upstream.executions(),
        3,
        "warm, in-flight and nudge, once each"
    );
}

/// `idemgate serve` in a process of its own (so that its gauges are its own).
struct Served {
    child: Child,
    admin: u16,
    listen: u16,
    _file: tempfile::NamedTempFile,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve(redis: &RedisServer, pg: &PgServer, upstream: &MockUpstream) -> Served {
    let (listen, admin) = (free_port(), free_port());
    let file = config_file(&format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         [redis]\nurl = \"{}\"\n{}\n[[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\n\
         upstream = \"{}\"\n[routes.idempotency]\nanonymous = \"shared\"\n",
        redis.url(),
        pg.section(""),
        upstream.url()
    ));
    let child = Command::new(BIN)
        .arg("serve")
        .env("IDEMGATE_CONFIG", file.path())
        .env_remove("RUST_LOG")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut served = Served {
        child,
        admin,
        listen,
        _file: file,
    };
    until_ready(&mut served.child, admin, Duration::from_secs(15)).await;
    served
}

impl Served {
    fn url_admin(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin)
    }

    async fn post(&self, key: &str) -> Answer {
        let url = format!("http://127.0.0.1:{}/v1/payments", self.listen);
        send(keyed_post(&reqwest::Client::new(), url, key, "{}")).await
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = reqwest::get(self.url_admin(path)).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_keeps_readyz_200_and_sets_postgres_up_to_0() {
    let redis = RedisServer::start();
    let mut pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let gateway = serve(&redis, &pg, &upstream).await;
    assert_eq!(gateway.post("before").await.0, 201);
    let (_, metrics) = gateway.get("/metrics").await;
    assert_eq!(sample(&metrics, "idemgate_postgres_up"), Some(1.0));

    pg.stop();
    let (status, headers, body) = gateway.post("during").await;
    assert_eq!(status, 503);
    assert_eq!(problem_code(&headers, &body), "store_unavailable");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(upstream.executions(), 1, "nothing forwarded");
    let (status, ready) = gateway.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(ready["down"], serde_json::json!(["postgres"]));
    assert_eq!(ready["dependencies"]["postgres"]["state"], "down");
    let (_, metrics) = gateway.get("/metrics").await;
    assert_eq!(sample(&metrics, "idemgate_postgres_up"), Some(0.0));

    pg.restart();
    let served = eventually(Duration::from_secs(10), async || {
        gateway.post("during").await.0 == 201
    });
    assert!(served.await, "not served once Postgres is back");
    let (_, metrics) = gateway.get("/metrics").await;
    assert_eq!(sample(&metrics, "idemgate_postgres_up"), Some(1.0));
    assert_eq!(upstream.executions(), 2);
}

/// A replica starting while its only reachable server is read-only (a standby a load
/// balancer still sends it to, mid-failover) waits for a writable one instead of
/// exiting: the migration is retried on new connections and lands once it is writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_on_a_read_only_server_waits_until_it_is_writable() {
    let pg = PgServer::start();
    sql(&pg, READ_ONLY).await;
    let store = PgStore::new(&PostgresConfig {
        url: pg.url(),
        ..PostgresConfig::default()
    })
    .unwrap();
    let migrating = tokio::spawn(async move { store.migrate().await });
    // Real time: it must not give up for a while.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !migrating.is_finished(),
        "gave up on a read-only server at once"
    );
    sql(&pg, WRITABLE).await;
    let applied = tokio::time::timeout(Duration::from_secs(10), migrating)
        .await
        .expect("the migration did not follow the server turning writable")
        .unwrap()
        .expect("migrated");
    assert!(!applied.is_empty(), "no migration applied");
}
