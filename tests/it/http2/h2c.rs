//! HTTP/2 with prior knowledge (h2c) on the proxy listener, beside HTTP/1.1 on the same
//! port: curl and reqwest as clients, many streams on one connection, and every limit
//! of a request applied to each stream. The raw-frame tests of the `server.http2_*`
//! settings are in `frames.rs`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use futures_util::{stream, StreamExt};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::support::{comparable, curl_head, problem_code, read, stack, TestApp};

/// A client that speaks HTTP/2 without asking (h2c, prior knowledge).
fn h2_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap()
}

/// One HTTP/2 connection (h2c, prior knowledge) to the proxy listener; each request is
/// a stream on it.
#[derive(Clone)]
struct H2 {
    send: http2::SendRequest<Full<Bytes>>,
    authority: String,
}

impl H2 {
    async fn connect(app: &TestApp) -> Self {
        let tcp = TcpStream::connect(app.addr).await.unwrap();
        let (send, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(connection);
        Self {
            send,
            authority: app.addr.to_string(),
        }
    }

    /// A keyed JSON POST to `/v1/payments` on a stream of this connection.
    async fn post(&self, key: &str, body: &str) -> (u16, HeaderMap, Bytes) {
        let request = Request::post(format!("http://{}/v1/payments", self.authority))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let mut send = self.send.clone();
        send.ready().await.unwrap();
        let response = send.send_request(request).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (parts.status.as_u16(), parts.headers, body)
    }
}

/// Runs curl with `args` plus the status line's protocol and code after the headers.
async fn curl(args: &[&str]) -> String {
    let out = curl_head(args).await;
    assert!(out.status.success(), "curl failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().to_ascii_lowercase()
}

#[tokio::test]
async fn curl_speaks_h2c_and_http1_on_the_same_port() {
    let (_redis, upstream, app) = stack("").await;
    let url = app.url("/v1/payments");
    let keyed = [
        "-X",
        "POST",
        "-H",
        "Idempotency-Key: curl-both",
        "-H",
        "Content-Type: application/json",
        "--data",
        "{\"n\":1}",
    ];
    let h2 = curl(&[&["--http2-prior-knowledge"], &keyed[..], &[url.as_str()]].concat()).await;
    assert!(h2.ends_with("2 201"), "{h2}");
    assert!(h2.contains("idempotent-replayed: false"), "{h2}");

    let h1 = curl(&[&["--http1.1"], &keyed[..], &[url.as_str()]].concat()).await;
    assert!(h1.ends_with("1.1 201"), "{h1}");
    assert!(h1.contains("idempotent-replayed: true"), "{h1}");
    assert_eq!(upstream.executions(), 1, "the HTTP/1.1 retry was a replay");

    // The admin listener is served the same way.
    let admin = format!("http://{}/healthz", app.admin);
    let healthz = curl(&["--http2-prior-knowledge", &admin]).await;
    assert!(healthz.ends_with("2 200"), "{healthz}");
    let healthz = curl(&["--http1.1", &admin]).await;
    assert!(healthz.ends_with("1.1 200"), "{healthz}");

    // An `Upgrade: h2c` request is answered over HTTP/1.1: no upgrade, as before.
    let upgrade = curl(&["--http2", &app.url("/v1/ping")]).await;
    assert!(upgrade.ends_with("1.1 201"), "{upgrade}");
}

#[tokio::test]
async fn fifty_streams_on_one_connection_execute_fifty_keys_once_then_replay_them() {
    let (_redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(200));
    let h2 = H2::connect(&app).await;
    let keys: Vec<String> = (0..50).map(|i| format!("h2-fifty-{i}")).collect();
    let send = |key: &String| {
        let (h2, key) = (h2.clone(), key.clone());
        async move { h2.post(&key, &format!("{{\"key\":\"{key}\"}}")).await }
    };
    let started = Instant::now();
    let first = join_all(keys.iter().map(send)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the streams ran side by side: {:?}",
        started.elapsed()
    );
    for (status, headers, _) in &first {
        assert_eq!(*status, 201);
        assert_eq!(headers["idempotent-replayed"], "false");
    }
    assert_eq!(upstream.executions(), 50);
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for seen in upstream.seen() {
        let key = seen.headers["idempotency-key"].to_str().unwrap();
        *per_key.entry(key.to_string()).or_default() += 1;
    }
    assert_eq!(per_key.len(), 50, "fifty distinct keys");
    assert!(per_key.values().all(|&n| n == 1), "{per_key:?}");

    let again = join_all(keys.iter().map(send)).await;
    for ((status, headers, body), (_, first_headers, first_body)) in again.iter().zip(&first) {
        assert_eq!(*status, 201);
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(body, first_body, "the body byte for byte");
        assert_eq!(comparable(headers), comparable(first_headers));
    }
    assert_eq!(upstream.executions(), 50, "replays only");
}

#[tokio::test]
async fn one_key_on_ten_concurrent_streams_executes_once() {
    let (_redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(500));
    let h2 = H2::connect(&app).await;
    let answers = join_all((0..10).map(|_| h2.post("h2-same-key", "{\"n\":1}"))).await;
    let tally = crate::support::tally(&answers);
    assert_eq!(tally.first, 1, "{tally:?}");
    assert_eq!(tally.first + tally.replayed + tally.in_flight, 10);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn streams_beyond_max_concurrent_streams_wait_for_one_to_end() {
    let (_redis, upstream, app) = stack("[server]\nhttp2_max_concurrent_streams = 2\n").await;
    let h2 = H2::connect(&app).await;
    // The first stream's exchange carries the gateway's SETTINGS to the client.
    assert_eq!(h2.post("h2-queued-first", "{}").await.0, 201);
    upstream.set_delay(Duration::from_millis(400));
    let started = Instant::now();
    let keys: Vec<String> = (0..6).map(|i| format!("h2-queued-{i}")).collect();
    let answers = join_all(keys.iter().map(|key| h2.post(key, "{}"))).await;
    let elapsed = started.elapsed();
    // hyper's h2 client does not open a stream beyond the announced limit: it waits for
    // one to end. Six 400ms calls, two at a time: three rounds, all answered.
    assert!(answers.iter().all(|(status, _, _)| *status == 201));
    assert!(elapsed >= Duration::from_millis(1150), "{elapsed:?}");
    assert_eq!(upstream.executions(), 7);
}

#[tokio::test]
async fn a_body_over_max_request_body_is_refused_per_stream_as_over_http1() {
    let (_redis, upstream, app) = stack("[server]\nmax_request_body = \"64KiB\"\n").await;
    let h2 = H2::connect(&app).await;
    let big = "x".repeat(200 << 10);
    let body = format!("{{\"pad\":\"{big}\"}}");
    let (status, headers, problem) = h2.post("h2-big", &body).await;
    let (h1_status, h1_headers, h1_problem) =
        read(app.post("h1-big", &body).send().await.unwrap()).await;
    assert_eq!((status, h1_status), (413, 413));
    assert_eq!(problem_code(&headers, &problem), "request_body_too_large");
    assert_eq!(problem, h1_problem, "the same problem+json");
    assert_eq!(
        problem_code(&h1_headers, &h1_problem),
        "request_body_too_large"
    );
    assert_eq!(upstream.executions(), 0);

    // The stream was refused, not the connection: the next stream on it is served.
    assert_eq!(h2.post("h2-small", "{}").await.0, 201);
}

#[tokio::test]
async fn streams_beyond_max_concurrent_requests_get_503_overloaded() {
    // One connection may take all of max_concurrent_requests here: the process limit is
    // tested.
    let (_redis, upstream, app) =
        stack("[server]\nmax_concurrent_requests = 2\nconnection_share = \"100%\"\n").await;
    upstream.set_delay(Duration::from_millis(800));
    let h2 = H2::connect(&app).await;
    let slow = |key: &'static str| {
        let h2 = h2.clone();
        tokio::spawn(async move { h2.post(key, "{\"n\":1}").await })
    };
    let (a, b) = (slow("h2-in-flight-a"), slow("h2-in-flight-b"));
    upstream.until_executions(2).await;

    let (status, headers, body) = h2.post("h2-in-flight-c", "{}").await;
    assert_eq!(status, 503, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "overloaded");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(a.await.unwrap().0, 201);
    assert_eq!(b.await.unwrap().0, 201);
    assert_eq!(
        upstream.executions(),
        2,
        "the refused stream was not forwarded"
    );
    // The metric's label keeps the setting's old name (docs/metrics.md).
    assert!(app.limited("max_in_flight").await >= 1.0);
}

#[tokio::test]
async fn a_header_list_over_max_header_size_is_refused_per_stream() {
    let (_redis, upstream, app) = stack("[server]\nmax_header_size = \"8KiB\"\n").await;
    let client = h2_client();
    let big = "v".repeat(12 << 10);
    let refused = app
        .post_by(&client, "h2-big-head", "{}")
        .header("x-big", big)
        .send()
        .await;
    match refused {
        Ok(response) => assert_eq!(response.status(), 431),
        Err(e) => panic!("expected a 431, got {e:?}"),
    }
    assert_eq!(upstream.executions(), 0);
    let (status, _, _) = read(
        app.post_by(&client, "h2-small-head", "{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "the connection goes on");
}

#[tokio::test]
async fn a_stream_whose_body_stalls_gets_408_and_the_connection_goes_on() {
    let (_redis, upstream, app) = stack("[server]\nbody_read_timeout = \"300ms\"\n").await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (mut send, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    // Part of a JSON body, then nothing: the stream stays open.
    let first = Frame::data(Bytes::from_static(b"{\"n\":"));
    let chunks = stream::once(async move { Ok::<_, Infallible>(first) }).chain(stream::pending());
    let request = Request::post(app.url("/v1/payments"))
        .header("idempotency-key", "h2-stalled")
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(chunks)))
        .unwrap();
    let started = Instant::now();
    let response = send.send_request(request).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    assert_eq!(parts.status, 408);
    assert_eq!(problem_code(&parts.headers, &body), "request_body_timeout");
    assert_eq!(upstream.executions(), 0);

    // Another stream on the same connection is served.
    let done = Full::new(Bytes::from_static(b"{}"))
        .map_err(|e| match e {})
        .boxed();
    let request = Request::post(app.url("/v1/payments"))
        .header("idempotency-key", "h2-after-stall")
        .header("content-type", "application/json")
        .body(done)
        .unwrap();
    send.ready().await.unwrap();
    assert_eq!(send.send_request(request).await.unwrap().status(), 201);
}
