//! `serve` as a process: SIGTERM drains what is in flight, closes idle keep-alive
//! connections at once, then exits 0; one JSON log line per request that never holds the
//! raw key, and a stuck stderr never stalls requests.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{MockUpstream, RedisServer};

use super::*;

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    // A keyed request: its upstream call runs in a detached task (`app.tasks`).
    sigterm_with_a_slow_request_in_flight(true, false).await;
}

#[tokio::test]
async fn sigterm_drains_an_in_flight_pass_through_request() {
    // Unkeyed, so proxied without idempotency: only the connection drain
    // (`GracefulShutdown`) keeps the process alive until its answer is written.
    sigterm_with_a_slow_request_in_flight(false, false).await;
}

#[tokio::test]
async fn sigterm_drains_an_in_flight_http2_stream() {
    // Unkeyed over h2c: the connection's graceful shutdown (GOAWAY) lets the stream
    // already open finish.
    sigterm_with_a_slow_request_in_flight(false, true).await;
}

async fn sigterm_with_a_slow_request_in_flight(keyed: bool, h2: bool) {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_delay(Duration::from_millis(1200));
    let Served {
        mut child,
        listen,
        _file,
        ..
    } = serve(&redis, &upstream, "", Stdio::null()).await;
    let client = match h2 {
        true => reqwest::Client::builder().http2_prior_knowledge().build(),
        false => reqwest::Client::builder().build(),
    };
    let mut request = (client.unwrap())
        .post(format!("http://127.0.0.1:{listen}/v1/payments"))
        .body("{}");
    if keyed {
        request = request.header("Idempotency-Key", "drain");
    }
    let in_flight = tokio::spawn(request.send());
    upstream.until_executions(1).await; // in flight at the upstream when the signal comes
    sigterm(&child);

    let answer = in_flight
        .await
        .unwrap()
        .expect("in-flight request completes");
    assert_eq!(answer.status(), 201);
    let version = [reqwest::Version::HTTP_11, reqwest::Version::HTTP_2][usize::from(h2)];
    assert_eq!(answer.version(), version);
    assert_eq!(
        answer.text().await.unwrap(),
        "{\"execution\":1,\"status\":201}"
    );
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(exit.code(), Some(0));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", listen)).is_err(),
        "no longer accepting"
    );
}

/// Idle keep-alive connections hear of the stop at once (the driver polls its watchers
/// only when one of them wakes it): the HTTP/1.1 one is closed, the HTTP/2 one gets
/// `GOAWAY` and is closed, and the process exits long before `shutdown_grace` (10 s).
#[tokio::test]
async fn sigterm_closes_idle_keep_alive_connections_at_once() {
    use crate::support::h2wire::{self, ACK, GOAWAY, PING};
    use tokio::io::AsyncWriteExt;

    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(&redis, &upstream, "", Stdio::null()).await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], served.listen));
    let mut h1 = tokio::net::TcpStream::connect(addr).await.unwrap();
    h1.write_all(b"GET /v1/idle HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let (status, _) = crate::support::raw::read_response(&mut h1).await.unwrap();
    assert_eq!(
        status, 201,
        "a keep-alive request answered (the upstream's status)"
    );
    let mut h2 = h2wire::open(addr).await;
    let (kind, ..) = h2wire::next(&mut h2).await.expect("the server's SETTINGS");
    assert_ne!(kind, GOAWAY);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let signalled = std::time::Instant::now();
    sigterm(&served.child);
    let within = Duration::from_secs(3);
    assert!(
        crate::support::closed_within(&mut h1, within).await,
        "the idle HTTP/1.1 connection is closed at the stop"
    );
    let goaway = tokio::time::timeout(within, h2wire::goaway(&mut h2)).await;
    assert!(
        matches!(goaway, Ok(Some(_))),
        "the idle HTTP/2 connection gets GOAWAY at the stop: {goaway:?}"
    );
    // hyper closes it once the client acknowledges its PING (the last GOAWAY's round
    // trip) and no stream is open.
    let acknowledged = async {
        while let Some((kind, flags, _, payload)) = h2wire::next_flagged(&mut h2).await {
            if kind == PING && flags & ACK == 0 {
                let pong = h2wire::frame(PING, ACK, 0, &payload);
                let _ = h2.write_all(&pong).await;
            }
        }
    };
    assert!(
        tokio::time::timeout(within, acknowledged).await.is_ok(),
        "the idle HTTP/2 connection is closed after GOAWAY"
    );
    let mut child = served.child;
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(exit.code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(6),
        "exited {:?} after the signal, before shutdown_grace",
        signalled.elapsed()
    );
}

#[tokio::test]
async fn json_logs_have_one_line_per_request_and_never_the_raw_key() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(
        &redis,
        &upstream,
        "[log]\nformat = \"json\"\n",
        Stdio::piped(),
    )
    .await;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        client
            .post(format!("http://127.0.0.1:{}/v1/payments", served.listen))
            .header("Idempotency-Key", "secret-key-zzz")
            .header("Authorization", "Bearer top-secret-token")
            .body("{\"card\":\"4242-very-private\"}")
            .send()
            .await
            .unwrap();
    }
    sigterm(&served.child);
    let out = tokio::task::spawn_blocking(move || served.child.wait_with_output().unwrap())
        .await
        .unwrap();
    let logs = String::from_utf8(out.stderr).unwrap();
    for secret in ["secret-key-zzz", "top-secret-token", "4242-very-private"] {
        assert!(
            !logs.contains(secret),
            "{secret} leaked into the logs:\n{logs}"
        );
    }
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["message"] == "request")
        .collect();
    assert_eq!(lines.len(), 2, "one line per request:\n{logs}");
    assert_eq!(lines[0]["outcome"], "executed");
    assert_eq!(lines[1]["outcome"], "replayed");
    for line in &lines {
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["route"], "p");
        assert_eq!(line["status"], 201);
        assert!(line["duration_ms"].is_number());
        assert_eq!(line["key_hash"].as_str().unwrap().len(), 12);
        assert_eq!(line["scope_hash"].as_str().unwrap().len(), 64);
        assert_eq!(line["request_id"].as_str().unwrap().len(), 32);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_stderr_drops_log_lines_but_never_stalls_requests() {
    // stderr is a pipe nobody reads: it fills after a few hundred lines. Requests must
    // keep being served; the lines that do not fit are dropped and counted.
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let served = serve(
        &redis,
        &upstream,
        "[log]\nqueue_lines = 16\n",
        Stdio::piped(),
    )
    .await;
    let (listen, admin) = (served.listen, served.admin);
    let _killed_on_drop = KillOnDrop(served.child);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for i in 0..1500 {
        let answer = client
            .post(format!("http://127.0.0.1:{listen}/v1/payments"))
            .header("Idempotency-Key", format!("stuck-stderr-{i}"))
            .body("{}")
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} with stderr full: {e}"));
        assert_eq!(answer.status(), 201, "request {i}");
    }
    let metrics = client
        .get(format!("http://127.0.0.1:{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped: u64 = (metrics.lines())
        .find_map(|l| l.strip_prefix("idemgate_log_lines_dropped_total "))
        .expect("dropped lines counter on /metrics")
        .parse()
        .unwrap();
    assert!(dropped > 0, "a full pipe drops lines: {dropped}");
}
