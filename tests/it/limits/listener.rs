//! Bounded resources on the proxy listener. `server.max_connections`
//! (connections beyond it wait, unserved, until one closes),
//! `server.max_concurrent_requests` (503 `overloaded` with `Retry-After`, no slot leaked
//! by a client that hangs up) and `server.buffer_budget` (a keyed request whose body does
//! not fit is refused before anything is claimed, and a hang-up gives its share back).
//! The write timeout is in `write_timeout.rs`.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::raw::read_response;
use crate::support::{completed_records, eventually, problem_code, read, stack, TestApp};

/// The head of a keyed POST to `/v1/payments` declaring `len` bytes of body.
fn keyed_head(app: &TestApp, key: &str, len: usize) -> String {
    format!(
        "POST /v1/payments HTTP/1.1\r\nHost: {}\r\nIdempotency-Key: {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n",
        app.addr
    )
}

#[tokio::test]
async fn connections_beyond_max_connections_wait_until_one_closes() {
    let (_redis, _upstream, app) =
        stack("[server]\nmax_connections = 2\nheader_read_timeout = \"30s\"\n").await;
    // Accepted in the order they connect, each served once it has a slot: these two
    // take both slots before the third is accepted.
    let idle = TcpStream::connect(app.addr).await.unwrap();
    let _idle2 = TcpStream::connect(app.addr).await.unwrap();

    // A third connection gets through the kernel's handshake, but is not served.
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    let get = format!("GET /v1/ping HTTP/1.1\r\nHost: {}\r\n\r\n", app.addr);
    third.write_all(get.as_bytes()).await.unwrap();
    let early = tokio::time::timeout(Duration::from_secs(1), read_response(&mut third)).await;
    assert!(
        early.is_err(),
        "a connection beyond server.max_connections was served: {early:?}"
    );

    // One closes: the waiting connection takes its slot and is answered.
    drop(idle);
    let (status, _) = tokio::time::timeout(Duration::from_secs(5), read_response(&mut third))
        .await
        .expect("served once a slot freed")
        .unwrap();
    assert_eq!(status, 201, "the mock upstream's answer");
    assert!(app.limited("max_connections").await >= 1.0);
}

#[tokio::test]
async fn requests_beyond_max_concurrent_requests_get_503_overloaded_and_hang_ups_free_their_slot_when_their_call_ends(
) {
    let (redis, upstream, app) = stack("[server]\nmax_concurrent_requests = 2\n").await;
    upstream.set_delay(Duration::from_millis(800));
    let slow = |key: &'static str| {
        let request = app.post(key, "{\"n\":1}");
        tokio::spawn(async move { read(request.send().await.unwrap()).await })
    };
    let (a, b) = (slow("in-flight-a"), slow("in-flight-b"));
    upstream.until_executions(2).await;

    let (status, headers, body) = read(app.post("in-flight-c", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "overloaded");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(a.await.unwrap().0, 201);
    assert_eq!(b.await.unwrap().0, 201);
    assert_eq!(
        upstream.executions(),
        2,
        "the refused request was not forwarded"
    );
    assert_eq!(redis.records().await.len(), 2, "nor claimed");
    // The metric's label keeps the setting's old name (docs/metrics.md).
    assert!(app.limited("max_in_flight").await >= 1.0);

    // Two clients hang up while their calls run: the calls go on, holding their slots
    // until they end, then the slots come back.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    for key in ["hang-up-d", "hang-up-e"] {
        let request = app.post_by(&impatient, key, "{}");
        assert!(request.send().await.is_err(), "{key} should time out");
    }
    let (status, _, body) = read(app.post("while-detached", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503, "the detached calls hold their slots: {body:?}");
    // Until their calls end, which is when they have stored their answers: all four
    // records completed.
    let stored = eventually(Duration::from_secs(5), async || {
        completed_records(&redis).await == 4
    });
    assert!(stored.await, "the detached calls never ended");
    assert_eq!(upstream.executions(), 4, "both detached calls ran");
    let (f, g) = (slow("after-hang-up-f"), slow("after-hang-up-g"));
    assert_eq!(f.await.unwrap().0, 201, "a slot leaked");
    assert_eq!(g.await.unwrap().0, 201, "a slot leaked");
}

#[tokio::test]
async fn bodies_beyond_buffer_budget_are_refused_before_claiming_and_hang_ups_give_back() {
    let (redis, upstream, app) = stack(
        "[server]\nmax_request_body = \"1MiB\"\nmax_response_body = \"1MiB\"\n\
         buffer_budget = \"2MiB\"\n",
    )
    .await;
    // Two clients announce 1 MiB bodies and send all but 16 bytes of them: the budget
    // (charged as bytes arrive) is spent.
    let mut uploads = Vec::new();
    for key in ["upload-1", "upload-2"] {
        let mut s = TcpStream::connect(app.addr).await.unwrap();
        s.write_all(keyed_head(&app, key, 1 << 20).as_bytes())
            .await
            .unwrap();
        s.write_all(&vec![b' '; (1 << 20) - 16]).await.unwrap();
        uploads.push(s);
    }
    // Real time: the gateway reads (and charges) what the kernel holds when it gets to
    // it, and nothing per app tells when (the buffered-bytes gauge is the process's).
    tokio::time::sleep(Duration::from_millis(300)).await;

    let padded = format!("{{\"pad\":\"{}\"}}", "x".repeat(64));
    let (status, headers, body) = read(app.post("fits-later", &padded).send().await.unwrap()).await;
    assert_eq!(status, 503, "{body:?}");
    assert_eq!(problem_code(&headers, &body), "overloaded");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(upstream.executions(), 0);
    assert!(redis.records().await.is_empty(), "nothing may be claimed");
    assert!(app.limited("buffer_budget").await >= 1.0);

    // One uploader hangs up: its share comes back, the same key now runs.
    drop(uploads.remove(0));
    // Refused (503, before anything is claimed) until the gateway has seen the hang-up.
    let mut answer = None;
    let admitted = eventually(Duration::from_secs(5), async || {
        answer = Some(read(app.post("fits-later", &padded).send().await.unwrap()).await);
        answer.as_ref().is_some_and(|(status, _, _)| *status != 503)
    });
    assert!(admitted.await, "the hung-up upload kept its share");
    let (status, headers, _) = answer.unwrap();
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "false");
    assert_eq!(upstream.executions(), 1);
}
