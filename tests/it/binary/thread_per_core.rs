//! `server.runtime = "thread_per_core"` (the `idemgate` binary, two workers): more
//! than one worker accepts connections; first execution and byte-identical replay on
//! every worker; one execution under duplicates spread over the workers; a waiting
//! duplicate on one worker is woken by a completion on the other; SIGTERM drains every
//! worker and leaves no lease; the workers' write-throughs share Postgres statements.
//!
//! Which worker serves a connection is the kernel's choice (`SO_REUSEPORT` hashes the
//! connection's addresses), so [`Tpc::pinned`] learns it: it opens one-connection
//! clients until the per-worker accept counter in `/metrics` shows one on each worker.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::support::process::{until_ready, BIN};
use crate::support::{
    comparable, eventually, keyed_post, read, tally, MockUpstream, PgServer, RedisServer,
};

const WORKERS: usize = 2;

/// `idemgate serve` in `thread_per_core` mode on free ports.
struct Tpc {
    child: Child,
    listen: u16,
    admin: u16,
    _file: tempfile::NamedTempFile,
}

impl Tpc {
    async fn start(redis: &RedisServer, upstream: &MockUpstream, extra: &str) -> Self {
        let port = idemgate_fleet::free_port;
        let (listen, admin) = (port(), port());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        write!(
            file,
            "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             shutdown_grace = \"10s\"\nruntime = \"thread_per_core\"\nworkers = {WORKERS}\n\
             [replay_cache]\nmax_bytes = \"0B\"\n\
             [redis]\nurl = \"{}\"\n[idempotency]\nanonymous = \"shared\"\n\
             replay_set_cookie = true\n{extra}\n\
             [[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
             upstream_timeout = \"5s\"\n",
            redis.url(),
            upstream.url()
        )
        .unwrap();
        let mut child = Command::new(BIN)
            .arg("serve")
            .env("IDEMGATE_CONFIG", file.path())
            .env_remove("RUST_LOG")
            .env("IDEMGATE__LOG__FILTER", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        until_ready(&mut child, admin, Duration::from_secs(15)).await;
        Self {
            child,
            listen,
            admin,
            _file: file,
        }
    }

    /// Connections accepted so far, by worker.
    async fn accepted(&self) -> BTreeMap<String, u64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin);
        let text = (reqwest::get(url).await.unwrap().text().await).unwrap();
        let prefix = "idemgate_worker_connections_accepted_total{worker=\"";
        (text.lines())
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|l| l.split_once("\"} "))
            .map(|(w, n)| (w.to_string(), n.trim().parse().unwrap()))
            .collect()
    }

    /// One client per worker, each holding one connection accepted by that worker.
    async fn pinned(&self) -> Vec<reqwest::Client> {
        let mut found: BTreeMap<String, reqwest::Client> = BTreeMap::new();
        for _ in 0..64 {
            let before = self.accepted().await;
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap();
            let unrouted = format!("http://127.0.0.1:{}/healthz-not-routed", self.listen);
            client.get(unrouted).send().await.unwrap();
            let after = self.accepted().await;
            let grew: Vec<&String> = (after.iter())
                .filter(|(w, n)| before.get(*w).copied().unwrap_or(0) < **n)
                .map(|(w, _)| w)
                .collect();
            assert_eq!(grew.len(), 1, "one new connection: {before:?} -> {after:?}");
            found.entry(grew[0].clone()).or_insert(client);
            if found.len() == WORKERS {
                return found.into_values().collect();
            }
        }
        panic!("64 connections all went to the workers {:?}", found.keys());
    }

    /// A keyed JSON POST to this process's `/v1/payments`, sent by `client`.
    fn post(&self, client: &reqwest::Client, key: &str, body: &str) -> reqwest::RequestBuilder {
        let url = format!("http://127.0.0.1:{}/v1/payments", self.listen);
        keyed_post(client, url, key, body.to_string())
    }
}

impl Drop for Tpc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn every_worker_accepts_and_replays_the_first_execution_byte_for_byte() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let tpc = Tpc::start(&redis, &upstream, "").await;
    // Fails if the mode degrades to one listener: the second worker never accepts.
    let clients = tpc.pinned().await;
    let (s1, h1, b1) = read(
        tpc.post(&clients[0], "tpc-1", "{\"a\":1}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s1, &h1["idempotent-replayed"]),
        (201, &"false".parse().unwrap())
    );
    for client in clients.iter().chain(clients.iter()) {
        let (s2, h2, b2) = read(tpc.post(client, "tpc-1", "{\"a\":1}").send().await.unwrap()).await;
        assert_eq!(s2, s1);
        assert_eq!(h2["idempotent-replayed"], "true");
        assert_eq!(comparable(&h2), comparable(&h1));
        assert_eq!(b2, b1);
    }
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn fifty_duplicates_spread_over_the_workers_execute_once() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_millis(300));
    let tpc = Tpc::start(&redis, &upstream, "").await;
    let before = tpc.accepted().await;
    // A client each: 50 connections, which the kernel spreads over the workers.
    let requests = (0..50).map(|_| async {
        let client = reqwest::Client::new();
        read(
            tpc.post(&client, "burst", "{\"amount\":5}")
                .send()
                .await
                .unwrap(),
        )
        .await
    });
    let answers = join_all(requests).await;
    assert_eq!(upstream.executions(), 1, "exactly one upstream execution");
    let t = tally(&answers);
    assert_eq!((t.first, t.first + t.in_flight + t.replayed), (1, 50));
    let after = tpc.accepted().await;
    let busy = (after.iter())
        .filter(|(w, n)| before.get(*w).copied().unwrap_or(0) < **n)
        .count();
    assert_eq!(busy, WORKERS, "the burst reached every worker: {after:?}");
}

#[tokio::test]
async fn a_waiting_duplicate_on_another_worker_is_woken() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_millis(1500));
    let tpc = Tpc::start(
        &redis,
        &upstream,
        "in_flight = \"wait\"\nwait_timeout = \"20s\"\n",
    )
    .await;
    let clients = tpc.pinned().await;
    let before = tpc.accepted().await;
    // Both directions: the holder on one worker, its duplicate waiting on the other.
    let pair = |holder: usize, key: &'static str| {
        let (holder, waiter) = (&clients[holder], &clients[1 - holder]);
        let (tpc, upstream) = (&tpc, &upstream);
        async move {
            let seen = upstream.executions();
            let first = tpc.post(holder, key, "{}").send();
            let second = async {
                // The holder's call reached the upstream: it holds the key.
                upstream.until_executions(seen + 1).await;
                let sent = Instant::now();
                let answer = read(tpc.post(waiter, key, "{}").send().await.unwrap()).await;
                (answer, sent.elapsed())
            };
            let (first, (second, waited)) = tokio::join!(first, second);
            (read(first.unwrap()).await, second, waited)
        }
    };
    // One after the other, so each client's one connection is free for its request.
    let results = [pair(0, "wake-a").await, pair(1, "wake-b").await];
    for ((s1, h1, b1), (s2, h2, b2), waited) in results {
        assert_eq!((s1, s2), (201, 201));
        assert_eq!(h2["idempotent-replayed"], "true");
        assert_eq!(b2, b1);
        assert_eq!(comparable(&h2), comparable(&h1));
        // Woken by the completion (~1.1 s after it started waiting), not by its
        // 20 s wait_timeout or the 30 s lease running out.
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }
    assert_eq!(upstream.executions(), 2);
    assert_eq!(
        tpc.accepted().await,
        before,
        "the requests used the pinned connections"
    );
}

#[tokio::test]
async fn sigterm_drains_every_worker_and_leaves_no_lease() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_millis(1200));
    let mut tpc = Tpc::start(&redis, &upstream, "").await;
    let clients = tpc.pinned().await;
    let in_flight: Vec<_> = (clients.iter().enumerate())
        .map(|(i, client)| tokio::spawn(tpc.post(client, &format!("drain-{i}"), "{}").send()))
        .collect();
    // Every worker's call reached the upstream before the signal.
    upstream.until_executions(WORKERS).await;
    let status = Command::new("kill")
        .args(["-TERM", &tpc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for answer in in_flight {
        let answer = answer.await.unwrap().expect("in-flight request completes");
        assert_eq!(answer.status(), 201);
        assert_eq!(answer.headers()["idempotent-replayed"], "false");
    }
    let exit = tpc.child.wait().unwrap();
    assert_eq!(exit.code(), Some(0));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", tpc.listen)).is_err(),
        "no worker still accepting"
    );
    assert_eq!(upstream.executions(), WORKERS);
    let records = redis.record_states().await;
    assert_eq!(records.len(), WORKERS, "{records:?}");
    for (record, state) in records {
        assert_eq!(
            state.as_deref(),
            Some("C"),
            "{record} is completed, not leased"
        );
    }
}

/// One write-through batcher for the process: records completed on both workers while
/// the first statement waits go out in one statement (rows written by one statement
/// share its transaction id), not one statement per worker.
#[tokio::test]
async fn write_throughs_from_both_workers_share_a_statement() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let section = format!(
        "\n[postgres]\nurl = \"{}\"\nstatement_timeout = \"20s\"\nclaims = \"redis\"\n",
        pg.url()
    );
    let tpc = Tpc::start(&redis, &upstream, &section).await;
    // Two connections on each worker: `pinned` returns one client per worker.
    let (a, b) = (tpc.pinned().await, tpc.pinned().await);
    // Postgres takes no writes (lookups go on) until the commit below.
    let locker = pg.client().await;
    (locker.batch_execute("BEGIN; LOCK TABLE idemgate_records IN SHARE MODE"))
        .await
        .unwrap();
    let waiting = async || -> i64 {
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'";
        (pg.client().await.query_one(sql, &[]).await.unwrap()).get(0)
    };
    let post =
        |client: &reqwest::Client, key: &str| tokio::spawn(tpc.post(client, key, "{}").send());
    // The first record's statement waits on the lock ...
    let mut sent = vec![post(&a[0], "share-0")];
    assert!(eventually(Duration::from_secs(10), async || waiting().await == 1).await);
    // ... and the records completed meanwhile, on both workers, queue behind it.
    sent.extend([
        post(&a[1], "share-1"),
        post(&b[0], "share-2"),
        post(&b[1], "share-3"),
    ]);
    let completed = async || {
        let states = redis.record_states().await;
        states
            .iter()
            .filter(|(_, s)| s.as_deref() == Some("C"))
            .count()
            == 4
    };
    assert!(eventually(Duration::from_secs(10), completed).await);
    tokio::time::sleep(Duration::from_millis(300)).await; // their writes are queued
    assert_eq!(waiting().await, 1, "one write-through statement at a time");
    locker.batch_execute("COMMIT").await.unwrap();
    for answer in sent {
        let answer = answer.await.unwrap().unwrap();
        assert_eq!(answer.status(), 201);
    }
    assert_eq!(upstream.executions(), 4);
    assert_eq!(pg.count("state = 'completed'").await, 4);
    let statements = pg.writing_statements().await;
    assert_eq!(
        statements, 2,
        "the three queued records share one statement"
    );
}

#[test]
fn check_config_names_the_runtime_keys_on_bad_values() {
    let file = tempfile::NamedTempFile::new().unwrap();
    for (var, value, key) in [
        ("IDEMGATE__SERVER__RUNTIME", "per_core", "server.runtime"),
        ("IDEMGATE__SERVER__WORKERS", "0", "server.workers"),
        ("IDEMGATE__SERVER__WORKERS", "lots", "server.workers"),
    ] {
        let out = Command::new(BIN)
            .args(["check-config", "--config"])
            .arg(file.path())
            .env(var, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert!(stderr.contains(key), "{var}={value}: {stderr}");
    }
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(file.path())
        .env("IDEMGATE__SERVER__RUNTIME", "thread_per_core")
        .env("IDEMGATE__SERVER__WORKERS", "3")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("runtime = \"thread_per_core\""), "{stdout}");
    assert!(stdout.contains("workers = 3"), "{stdout}");
}
