//! One execution under concurrent duplicates, and 409 while the key is in flight.
//! The same with claims written through to Postgres, in shared statements.

use std::time::Duration;

use futures_util::future::join_all;

use crate::support::{durable_stack, eventually, problem_code, read, stack, tally};

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
    upstream.until_executions(1).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_claims_of_concurrent_requests_share_statements_and_run_once() {
    let (_redis, pg, upstream, app) = durable_stack("claims = \"write_through\"", "").await;
    upstream.set_delay(Duration::from_millis(1500));
    let app = &app;
    // 40 keys, each sent three times at once.
    let keys: Vec<String> = (0..120).map(|i| format!("wt-{}", i % 40)).collect();
    let requests = keys.iter().map(|key| async move {
        read(app.post(key, r#"{"amount":5}"#).send().await.unwrap()).await
    });
    // While the first executions are upstream, their claims are the only writes.
    let check = async {
        let leased = eventually(Duration::from_secs(10), async || {
            pg.count("state = 'leased'").await == 40
        })
        .await;
        (leased, pg.writing_statements().await)
    };
    let (answers, (leased, statements)) = tokio::join!(join_all(requests), check);
    assert!(leased, "every key's claim is durable before forwarding");
    assert!(
        statements < 40,
        "40 concurrent write-through claims share statements, ran {statements}"
    );
    let t = tally(&answers);
    assert_eq!((t.first, t.first + t.in_flight), (40, 120), "{t:?}");
    assert_eq!(upstream.executions(), 40, "one execution per key");
    let mut executed: Vec<String> = (upstream.seen().iter())
        .map(|s| s.headers["idempotency-key"].to_str().unwrap().to_string())
        .collect();
    executed.sort();
    executed.dedup();
    assert_eq!(executed.len(), 40, "every key executed exactly once");
    assert!(
        eventually(Duration::from_secs(5), async || pg
            .count("state = 'completed'")
            .await
            == 40)
        .await
    );
}
