//! Storing a response outlasting the store's bad moments: the heartbeat runs while a
//! response is stored, and with Redis as the only store a completion keeps trying
//! while the lease lasts (a failover promotes a replica within it), instead of
//! answering a response that is stored nowhere, whose key would run again.

use std::time::{Duration, Instant};

use fred::prelude::{ClientLike, Value};

use crate::support::{durable_stack, read, stack, RedisServer};

/// Makes Redis refuse every write (`-NOREPLICAS`: it has no replica), as a primary
/// that lost its role refuses them during a failover, or lets them through again.
async fn refuse_writes(redis: &RedisServer, refuse: bool) {
    let admin = redis.client().await;
    let n = if refuse { "1" } else { "0" };
    let _: Value = admin
        .custom(
            fred::cmd!("CONFIG"),
            vec!["SET", "min-replicas-to-write", n],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn redis_only_completion_is_retried_while_the_lease_lasts() {
    // Three tries take about 0.2 s; writes are refused for 2.5 s. Before, the client
    // got the upstream's answer, nothing was stored, and the key answered 409 until
    // its lease ran out, then ran again.
    let (redis, upstream, app) = stack("[idempotency]\nlock_ttl = \"10s\"\n").await;
    upstream.set_delay(Duration::from_millis(500));
    let request = app.post("failover", "{\"amount\":1}").send();
    let first = tokio::spawn(async { (request.await, Instant::now()) });
    upstream.until_executions(1).await;
    refuse_writes(&redis, true).await;
    // Real time: an outage of 2.5 s, well past the completion (due at 500 ms).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let allowed = Instant::now();
    refuse_writes(&redis, false).await;
    let (response, answered) = first.await.unwrap();
    let (status, _, body) = read(response.unwrap()).await;
    assert_eq!(status, 201);
    assert!(
        answered >= allowed,
        "answered {:?} before writes were allowed again",
        allowed - answered
    );
    let (_, headers, again) =
        read(app.post("failover", "{\"amount\":1}").send().await.unwrap()).await;
    assert_eq!(
        headers["idempotent-replayed"], "true",
        "stored once Redis took writes again"
    );
    assert_eq!(again, body);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn redis_only_completion_gives_up_when_the_lease_runs_out() {
    // Writes refused for longer than the lease: the client is answered (unstored) at
    // about the lease's end, not held until Redis comes back.
    let (redis, upstream, app) = stack("[idempotency]\nlock_ttl = \"1500ms\"\n").await;
    upstream.set_delay(Duration::from_millis(300));
    let started = Instant::now();
    let first = tokio::spawn(app.post("outage", "{}").send());
    upstream.until_executions(1).await;
    refuse_writes(&redis, true).await;
    let (status, _, _) = read(first.await.unwrap().unwrap()).await;
    let took = started.elapsed();
    refuse_writes(&redis, false).await;
    assert_eq!(
        status, 201,
        "the upstream acted: its client gets its answer"
    );
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(3000),
        "answered after {took:?}: should be about the lease's end (1.5 s after the claim)"
    );
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_written_through_lease_is_kept_in_postgres_while_redis_is_down() {
    // claims = "write_through": the lease is in both tiers and Postgres decides. Redis
    // dies during a 4 s upstream call; the heartbeat must still extend the Postgres
    // lease, or it runs out after lock_ttl (1.5 s) and a retry, claiming in Postgres
    // while Redis is down, takes the key over and runs it a second time.
    let (mut redis, _pg, upstream, app) = durable_stack(
        "claims = \"write_through\"",
        "[idempotency]\nlock_ttl = \"1500ms\"\n",
    )
    .await;
    upstream.set_delay(Duration::from_millis(4000));
    let first = tokio::spawn(app.post("wt", "{}").send());
    upstream.until_executions(1).await;
    redis.stop();
    // Real time: past lock_ttl, when the lease would have run out without the heartbeat.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        let status = app.post("wt", "{}").send().await.unwrap().status();
        assert_ne!(
            status, 201,
            "a retry ran the key while its first execution was still running"
        );
        tokio::time::sleep(Duration::from_millis(200)).await; // retries paced over 1.5 s
    }
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(upstream.executions(), 1);
}
