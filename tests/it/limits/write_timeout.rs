//! `server.write_timeout`. A client that sends a keyed request and
//! never reads its (large) response is disconnected once the write has waited that
//! long, and the response it pinned goes back to `server.buffer_budget`: a replay that
//! did not fit while it was held does afterwards.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::support::raw::{big_upstream, connect_small, BIG};
use crate::support::{completed_records, RedisServer, TestApp};
use crate::support::{config, eventually, problem_code, read, read_until_closed};

#[tokio::test]
async fn a_client_that_does_not_read_is_cut_off_and_its_response_released() {
    let redis = RedisServer::start();
    let (upstream, executions) = big_upstream().await;
    let app = TestApp::spawn(config(
        &redis.url(),
        &format!("http://{upstream}"),
        "[server]\nmax_request_body = \"64KiB\"\nmax_response_body = \"8MiB\"\n\
         buffer_budget = \"9MiB\"\nwrite_timeout = \"2s\"\n",
    ))
    .await;

    // The client sends its request and never reads.
    let mut stalled = connect_small(app.addr).await;
    let request = format!(
        "POST /v1/payments HTTP/1.1\r\nHost: {}\r\nIdempotency-Key: big\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
        app.addr
    );
    stalled.write_all(request.as_bytes()).await.unwrap();
    let sent = Instant::now();
    // Executed and stored: its answer is then held for the client that does not read.
    let stored = eventually(Duration::from_secs(5), async || {
        completed_records(&redis).await == 1
    });
    assert!(stored.await, "never executed and stored");
    assert_eq!(executions.load(Ordering::SeqCst), 1);

    // While its 6 MiB are held, a replay of another 6 MiB does not fit the budget.
    let replay = || app.post("big", "{}").send();
    let (status, headers, body) = read(replay().await.unwrap()).await;
    assert_eq!(
        status, 503,
        "replay fitted while the stalled response was held"
    );
    assert_eq!(problem_code(&headers, &body), "overloaded");
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "too slow to observe the hold"
    );

    // Past the write timeout the connection is gone: reading now gets what the
    // kernel held, then the end, never the whole response.
    tokio::time::sleep(Duration::from_secs(2) + Duration::from_millis(1500)).await;
    let (got, ended) = read_until_closed(&mut stalled, Duration::from_secs(5)).await;
    assert!(ended, "the connection is still open after {got} bytes");
    assert!(got < BIG, "the whole response arrived ({got} bytes)");
    assert!(app.limited("write_timeout").await >= 1.0);

    // Its share of the budget came back: the replay fits now.
    let (status, headers, body) = read(replay().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(body.len(), BIG);
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}
