//! Behaviours 4 and 7: one execution under concurrent duplicates; 409 while in flight.

use std::time::Duration;

use futures_util::future::join_all;

use crate::support::{problem_code, read, stack, tally};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_duplicates_execute_once() {
    let (_redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(300));
    let requests = (0..50)
        .map(|_| async { read(app.post("burst", r#"{"amount":5}"#).send().await.unwrap()).await });
    let answers = join_all(requests).await;

    assert_eq!(upstream.executions(), 1, "exactly one upstream execution");
    let t = tally(&answers);
    assert_eq!(t.first, 1);
    assert_eq!(t.first + t.in_flight + t.replayed, 50);
    // Once settled, every duplicate is a replay.
    let again = join_all((0..10).map(|_| app.post("burst", r#"{"amount":5}"#).send())).await;
    for r in again {
        assert_eq!(r.unwrap().headers()["idempotent-replayed"], "true");
    }
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn duplicate_in_flight_gets_409_with_retry_after() {
    let (_redis, upstream, app) = stack("").await;
    upstream.set_delay(Duration::from_millis(800));
    let first = tokio::spawn(app.post("slow", "{}").send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, headers, body) = read(app.post("slow", "{}").send().await.unwrap()).await;
    assert_eq!(status, 409);
    assert_eq!(problem_code(&headers, &body), "idempotency_key_in_flight");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(
        (1..=30).contains(&retry),
        "Retry-After {retry} from a 30 s lease"
    );
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(upstream.executions(), 1);
}
