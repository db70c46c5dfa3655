//! HAProxy speaking HTTP/2 to the replicas (`server ... proto h2`, as `make up
//! PROTO=h2` runs it): two `idemgate serve` processes on one Redis, HAProxy in front,
//! started by the fleet launcher; clients speak HTTP/1.1 to HAProxy. Keyed POSTs run
//! the upstream once per key, their retries replay byte-identical, concurrent
//! duplicates (streams multiplexed on HAProxy's connections to the replicas) run it
//! once. The replicas' own request lines say which protocol reached them
//! (`protocol`): `http2` for every request HAProxy forwarded with `proto h2`, and
//! `http1` for one forwarded by the same HAProxy configuration without it, so the
//! check can tell the two apart.

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use idemgate_fleet::{free_port, BackendProto, HaProxy, HaproxyConfig, Host, Replica};

use crate::support::process::BIN;
use crate::support::{
    comparable, eventually, keyed_post, send, tally, wait_ready, Answer, MockUpstream, RedisServer,
};

const KEYS: usize = 20;
const DUPLICATES: usize = 10;

fn replica_toml(port: u16, admin: u16, redis: &RedisServer, upstream: &MockUpstream) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         shutdown_grace = \"1s\"\n\
         [log]\nformat = \"json\"\n\
         [redis]\nurl = \"{}\"\n\
         [idempotency]\nscope_headers = [\"X-Tenant-Id\"]\nin_flight = \"wait\"\nwait_timeout = \"10s\"\nreplay_set_cookie = true\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n",
        redis.url(),
        upstream.url(),
    )
}

/// Two replicas of this build, each ready.
async fn replicas(dir: &Path, redis: &RedisServer, upstream: &MockUpstream) -> Vec<Replica> {
    let http = reqwest::Client::new();
    let mut replicas = Vec::new();
    for index in 0..2 {
        let (port, admin) = (free_port(), free_port());
        let config = dir.join(format!("replica{index}.toml"));
        std::fs::write(&config, replica_toml(port, admin, redis, upstream)).unwrap();
        let log = dir.join(format!("replica{index}.log"));
        let mut replica = Replica::new(Path::new(BIN), index, port, admin, config, log);
        replica.start();
        wait_ready(&http, &mut replica, Duration::from_secs(30)).await;
        replicas.push(replica);
    }
    replicas
}

/// HAProxy in front of `replicas`, speaking `proto` to them, its files in `dir`; returns
/// once both servers pass their health checks (a request reached each replica).
async fn haproxy(dir: &Path, replicas: &[Replica], proto: BackendProto) -> HaProxy {
    std::fs::create_dir_all(dir).unwrap();
    let haproxy = HaProxy::start(
        dir,
        &HaproxyConfig {
            host: Host::loopback(),
            port: free_port(),
            backends: replicas.iter().map(Replica::backend).collect(),
            abort_on_close: true,
            health_checks: true,
            proto,
        },
    );
    let http = reqwest::Client::new();
    let tag = format!("warm-{}", proto.as_str());
    let mut n = 0;
    let both = eventually(Duration::from_secs(10), async || {
        n += 1;
        let id = format!("{tag}-{n}");
        let url = format!("{}/v1/ping", haproxy.url());
        let r = http.get(url).header("x-request-id", &id).send().await;
        r.is_ok_and(|r| r.status().is_success())
            && replicas.iter().all(|r| {
                request_lines(r).iter().any(|l| {
                    l["request_id"]
                        .as_str()
                        .is_some_and(|i| i.starts_with(&tag))
                })
            })
    })
    .await;
    let cfg = std::fs::read_to_string(dir.join("haproxy.cfg")).unwrap();
    let log = std::fs::read_to_string(dir.join("haproxy.log")).unwrap_or_default();
    assert!(
        both,
        "a replica is not served through HAProxy:\n{cfg}\n{log}"
    );
    haproxy
}

/// The replica's `request` log lines (one per request), as JSON.
fn request_lines(replica: &Replica) -> Vec<serde_json::Value> {
    (replica.log_text().lines())
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["message"] == "request")
        .collect()
}

/// The `protocol` of each request line whose request id starts with `prefix`, over
/// both replicas, and how many such lines each replica logged.
fn protocols(replicas: &[Replica], prefix: &str) -> (Vec<String>, Vec<usize>) {
    let mut seen = Vec::new();
    let mut per_replica = Vec::new();
    for r in replicas {
        let mine: Vec<String> = (request_lines(r).into_iter())
            .filter(|l| {
                l["request_id"]
                    .as_str()
                    .is_some_and(|i| i.starts_with(prefix))
            })
            .map(|l| l["protocol"].as_str().unwrap_or("(none)").to_string())
            .collect();
        per_replica.push(mine.len());
        seen.extend(mine);
    }
    (seen, per_replica)
}

/// A keyed POST of tenant `acme` through `front`, with request id `id`.
async fn post(http: &reqwest::Client, front: &str, key: &str, id: &str) -> Answer {
    let body = format!("{{\"amount\":10,\"key\":\"{key}\"}}");
    let request = keyed_post(http, format!("{front}/v1/payments"), key, body);
    send(
        request
            .header("x-request-id", id)
            .header("X-Tenant-Id", "acme"),
    )
    .await
}

/// Every replica's log, each under a header line.
fn logs(replicas: &[Replica]) -> String {
    (replicas.iter())
        .map(|r| format!("--- replica {} ---\n{}", r.index, r.log_text()))
        .collect::<String>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn haproxy_speaking_h2_to_two_replicas_executes_once_and_replays() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let replicas = replicas(dir.path(), &redis, &upstream).await;
    let lb = haproxy(&dir.path().join("h2"), &replicas, BackendProto::H2).await;
    let front = Front {
        url: lb.url(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        upstream: &upstream,
        replicas: &replicas,
        before: upstream.executions(),
    };

    let firsts = keys_run_once_and_replay(&front).await;
    a_burst_runs_once(&front).await;
    every_request_reached_a_replica_over_h2(&replicas).await;

    // The control: the same HAProxy configuration without `proto h2` reaches the same
    // replicas over HTTP/1.1, and their request lines say so.
    let plain = haproxy(&dir.path().join("http1"), &replicas, BackendProto::Http1).await;
    let a = post(&front.http, &plain.url(), "k-0", "h1-retry").await;
    assert_eq!((a.0, &a.2), (firsts[0].0, &firsts[0].2));
    let mut got = Vec::new();
    let logged = eventually(Duration::from_secs(5), async || {
        got = protocols(&replicas, "h1-").0;
        !got.is_empty()
    })
    .await;
    assert!(logged && got == ["http1"], "{got:?}\n{}", logs(&replicas));
}

/// HAProxy's front as the test sends through it, and what it checks against: the
/// upstream and its executions before the test, the replicas and their logs.
struct Front<'a> {
    url: String,
    http: reqwest::Client,
    upstream: &'a MockUpstream,
    replicas: &'a [Replica],
    before: usize,
}

/// [`KEYS`] keys, once each, execute once; then every retry replays the stored answer
/// byte for byte. The first answers.
async fn keys_run_once_and_replay(f: &Front<'_>) -> Vec<Answer> {
    let (http, front, upstream, before) = (&f.http, &f.url, f.upstream, f.before);
    let mut firsts = Vec::new();
    for k in 0..KEYS {
        let a = post(http, front, &format!("k-{k}"), &format!("h2-first-{k}")).await;
        assert_eq!(
            (a.0, a.1.get("idempotent-replayed")),
            (201, Some(&"false".parse().unwrap())),
            "k-{k}: {a:?}\n{}",
            logs(f.replicas)
        );
        firsts.push(a);
    }
    assert_eq!(
        upstream.executions() - before,
        KEYS,
        "one execution per key"
    );
    for (k, first) in firsts.iter().enumerate() {
        let again = post(http, front, &format!("k-{k}"), &format!("h2-retry-{k}")).await;
        assert_eq!(again.1["idempotent-replayed"], "true", "k-{k}");
        assert_eq!(
            (again.0, comparable(&again.1), &again.2),
            (first.0, comparable(&first.1), &first.2),
            "k-{k}: the replay differs from the first answer"
        );
    }
    assert_eq!(
        upstream.executions() - before,
        KEYS,
        "retries do not execute"
    );
    firsts
}

/// Concurrent duplicates of one key while the first runs: one execution, the others
/// wait (on either replica) and replay it.
async fn a_burst_runs_once(f: &Front<'_>) {
    let (upstream, before) = (f.upstream, f.before);
    upstream.set_delay(Duration::from_millis(500));
    let started = Instant::now();
    let (client, url) = (&f.http, &f.url);
    let burst = (0..DUPLICATES)
        .map(|i| async move { post(client, url, "burst", &format!("h2-burst-{i}")).await });
    let answers = join_all(burst).await;
    upstream.set_delay(Duration::ZERO);
    let t = tally(&answers);
    assert_eq!(
        (t.first, t.replayed, t.in_flight),
        (1, DUPLICATES - 1, 0),
        "{t:?}\n{}",
        logs(f.replicas)
    );
    assert!(
        answers.iter().all(|a| a.2 == answers[0].2),
        "answers differ"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken, not timed out"
    );
    assert_eq!(
        upstream.executions() - before,
        KEYS + 1,
        "the burst ran once"
    );
}

/// Every one of those requests reached a replica over HTTP/2, and both replicas
/// served some (round robin).
async fn every_request_reached_a_replica_over_h2(replicas: &[Replica]) {
    let want = 2 * KEYS + DUPLICATES;
    let mut got = (Vec::new(), Vec::new());
    let logged = eventually(Duration::from_secs(5), async || {
        got = protocols(replicas, "h2-");
        got.0.len() == want
    })
    .await;
    assert!(
        logged,
        "{} request lines of {want}\n{}",
        got.0.len(),
        logs(replicas)
    );
    assert!(
        got.0.iter().all(|p| p == "http2"),
        "a request reached a replica over another protocol than HTTP/2: {:?}",
        got.0
    );
    assert!(got.1.iter().all(|n| *n > 0), "per replica: {:?}", got.1);
}
