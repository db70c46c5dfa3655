//! Postgres write-through, cold-Redis fallback, Redis-outage policies,
//! stricter claims, migrations and the reaper, against real Redis and Postgres.

use std::time::Duration;

use futures_util::future::join_all;

use super::{until_epochs_swept, warm_up};
use crate::support::{
    comparable, durable_stack, eventually, problem_code, read, replays_within, tally,
};

#[tokio::test]
async fn redis_restarted_empty_replays_from_postgres_and_rewarms() {
    let (mut redis, pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    let sent = std::time::Instant::now();
    let (s1, h1, b1) = read(app.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    // The write-through is inside this answer: an upper bound of its one-way latency.
    let write_latency = sent.elapsed();
    assert_eq!(s1, 201);
    assert_eq!(
        pg.count("state = 'completed'").await,
        1,
        "committed before the answer"
    );
    redis.restart();
    // The longest attempt bounds the delay of the one that re-warmed Redis.
    let mut rewarm_latency = Duration::ZERO;
    let replayed = eventually(Duration::from_secs(10), async || {
        let asked = std::time::Instant::now();
        let r = app.post("k", r#"{"amount":7}"#).send().await.unwrap();
        rewarm_latency = rewarm_latency.max(asked.elapsed());
        r.status() == 201 && r.headers()["idempotent-replayed"] == "true"
    })
    .await;
    assert!(replayed, "the stored response survives Redis");
    let (s2, h2, b2) = read(app.post("k", r#"{"amount":7}"#).send().await.unwrap()).await;
    assert_eq!((s2, &b2), (s1, &b1));
    assert_eq!(comparable(&h2), comparable(&h1));
    assert_eq!(upstream.executions(), 1);
    let keys = redis.records().await;
    let record = keys
        .iter()
        .find(|k| k.contains('{'))
        .expect("re-warmed into redis");
    // Read after the clock: the time left only shrinks between the two.
    let advertised = httpdate::parse_http_date(h1["idempotency-expires"].to_str().unwrap());
    let until = advertised
        .unwrap()
        .duration_since(std::time::SystemTime::now());
    let ttl = redis.pttl(record).await;
    // What is left of the record's ttl (rounded up to its whole second), never more.
    assert!(
        ttl > 23 * 3600 * 1000 && ttl <= 24 * 3600 * 1000 + 1000,
        "remaining ttl, got {ttl}"
    );
    // Postgres counts the expiry down from when the write reached it (its own clock):
    // later than it was sent, by at most the write's latency, never more. The gateway
    // re-warms Redis with what Postgres said was left, less the time since it asked;
    // Redis counts that down from when the command reaches it, later by at most the
    // re-warming request's own latency (on a loaded machine, more than 50 ms).
    let bound = until.unwrap().as_millis() + write_latency.as_millis() + rewarm_latency.as_millis();
    assert!(
        ttl as u128 <= bound,
        "re-warmed for no longer than the record's advertised expiry, the write's \
         latency and the re-warm's: {ttl} ms > {bound} ms"
    );
    // A different body with the same key is still a mismatch.
    redis.restart();
    let mismatch = eventually(Duration::from_secs(10), async || {
        app.post("k", r#"{"amount":8}"#)
            .send()
            .await
            .unwrap()
            .status()
            == 422
    })
    .await;
    assert!(mismatch);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_moves_claims_to_postgres_with_one_execution() {
    let (mut redis, pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    redis.stop();
    upstream.set_delay(Duration::from_millis(300));
    let answers = join_all((0..50).map(|_| async {
        read(app.post("outage", r#"{"amount":1}"#).send().await.unwrap()).await
    }))
    .await;
    assert_eq!(
        upstream.executions(),
        1,
        "exactly one execution with claims in postgres"
    );
    assert_eq!(tally(&answers).first, 1);
    assert_eq!(pg.count("state = 'completed'").await, 1);

    // Redis returns: claims go back to it, and the key completed meanwhile replays.
    redis.restart();
    let back = eventually(Duration::from_secs(10), async || {
        app.post("after", "{}").send().await.unwrap();
        !redis.records().await.is_empty()
    })
    .await;
    assert!(back, "claims returned to redis");
    let r = app.post("outage", r#"{"amount":1}"#).send().await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(upstream.executions(), 2, "one for each key");
}

#[tokio::test]
async fn postgres_stopped_during_write_through_loses_nothing() {
    let (mut redis, mut pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    // A Redis that has held every write for two days (longer than any ttl): its claims
    // stand while Postgres cannot be asked. (A cold Redis fails closed instead: see
    // `cold_redis_with_postgres_down_fails_closed`.)
    warm_up(&redis).await;
    until_epochs_swept(&redis).await;
    pg.stop();
    for i in 0..5 {
        let r = app.post(&format!("pgdown-{i}"), "{}").send().await.unwrap();
        assert_eq!(r.status(), 201, "the client still gets its response");
    }
    pg.restart();
    let drained = eventually(Duration::from_secs(15), async || {
        pg.count("state = 'completed'").await == 5
    })
    .await;
    assert!(drained, "queued records reach postgres once it returns");
    // Prove they are the durable copy: lose Redis and replay every one.
    redis.restart();
    for i in 0..5 {
        let key = format!("pgdown-{i}");
        let replayed = replays_within(&app, &key, "{}", Duration::from_secs(10)).await;
        assert!(replayed, "key {i}");
    }
    assert_eq!(upstream.executions(), 5);
}

#[tokio::test]
async fn policy_reject_answers_503_and_pass_through_bypasses() {
    let (mut redis, _pg, upstream, app) = durable_stack(
        "claims = \"redis\"",
        "[idempotency]\non_redis_unavailable = \"reject\"\n",
    )
    .await;
    redis.stop();
    let (status, headers, body) = read(app.post("r", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert_eq!(problem_code(&headers, &body), "store_unavailable");
    assert_eq!(upstream.executions(), 0);
    let ready = app.readyz().await;
    assert_eq!(
        ready.status(),
        503,
        "reject cannot serve keyed requests without redis"
    );

    let (mut redis, _pg, upstream, app) = durable_stack(
        "claims = \"redis\"",
        "[idempotency]\non_redis_unavailable = \"pass_through\"\n",
    )
    .await;
    redis.stop();
    for _ in 0..2 {
        let r = app.post("p", "{}").send().await.unwrap();
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["idempotency-status"], "bypassed");
    }
    assert_eq!(
        upstream.executions(),
        2,
        "bypassed requests are not deduplicated"
    );
}

#[tokio::test]
async fn write_through_claims_close_the_lost_claim_window() {
    let (mut redis, pg, upstream, app) = durable_stack("claims = \"write_through\"", "").await;
    upstream.set_delay(Duration::from_millis(1500));
    let first = tokio::spawn(app.post("w", "{}").send());
    upstream.until_executions(1).await;
    assert_eq!(
        pg.count("state = 'leased'").await,
        1,
        "the claim is durable before forwarding"
    );
    redis.restart(); // the Redis lease is gone
    let saw_lease = eventually(Duration::from_secs(5), async || {
        app.post("w", "{}").send().await.unwrap().status() == 409
    })
    .await;
    assert!(
        saw_lease,
        "the retry sees the postgres lease instead of running again"
    );
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(upstream.executions(), 1);
    assert_eq!(pg.count("state = 'completed'").await, 1);
}

#[tokio::test]
async fn without_write_through_claims_the_same_fault_runs_twice() {
    // The documented window of the default mode, measured so docs/guarantees.md stays honest.
    let (mut redis, _pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    upstream.set_delay(Duration::from_millis(1500));
    let first = tokio::spawn(app.post("w", "{}").send());
    upstream.until_executions(1).await;
    redis.restart();
    let ran = eventually(Duration::from_secs(5), async || {
        app.post("w", "{}").send().await.unwrap().status() == 201
    })
    .await;
    assert!(ran);
    first.await.unwrap().unwrap();
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn write_through_claims_keep_a_completion_that_redis_refused() {
    // Redis lost the lease and another request holds the Redis key when the first
    // holder completes: Postgres (which holds the first holder's lease) decides.
    let (redis, _pg, upstream, app) = durable_stack("claims = \"write_through\"", "").await;
    upstream.set_delay(Duration::from_millis(800));
    let first = tokio::spawn(app.post("refused", "{}").send());
    upstream.until_executions(1).await;
    let key = redis.records().await.pop().unwrap();
    let admin = redis.client().await;
    (redis.set_record_fields(&key, &[("s", b"L"), ("t", b"someone-else")])).await;
    let (status, _, body) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    let _: i64 = fred::prelude::KeysInterface::del(&admin, key.as_str())
        .await
        .unwrap();
    let (_, headers, again) = read(app.post("refused", "{}").send().await.unwrap()).await;
    assert_eq!(
        headers["idempotent-replayed"], "true",
        "the acknowledged response was kept"
    );
    assert_eq!(again, body);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_slow_redis_is_not_an_outage_so_claims_do_not_move_to_postgres() {
    // A claim that times out on a live connection answers 503; it must not send claims
    // to Postgres, which cannot see the Redis lease of the request already running.
    let (redis, _pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    upstream.set_delay(Duration::from_millis(1200));
    let first = tokio::spawn(app.post("slow-redis", "{}").send());
    upstream.until_executions(1).await;
    let admin = redis.client().await;
    let _: fred::prelude::Value = fred::prelude::ClientLike::custom(
        &admin,
        fred::cmd!("CLIENT"),
        vec!["PAUSE", "500", "ALL"],
    )
    .await
    .unwrap();
    let (status, headers, body) = read(app.post("slow-redis", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, problem_code(&headers, &body).as_str()),
        (503, "store_unavailable")
    );
    // Paused too, the admin client is answered once the pause is over.
    let _: () = fred::prelude::ClientLike::ping(&admin, None).await.unwrap();
    let (status, _, _) = read(app.post("slow-redis", "{}").send().await.unwrap()).await;
    assert_eq!(status, 409, "the running request still holds the key");
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cold_lookups_replay_each_key_its_own_response_once() {
    // Claim path with batched Postgres lookups: Redis comes back empty, then stored keys
    // and new keys arrive all at once; their lookups share statements.
    let (mut redis, pg, upstream, app) = durable_stack("claims = \"redis\"", "").await;
    let app = &app;
    let body = |i: usize| format!(r#"{{"amount":{i}}}"#);
    let first = join_all((0..20).map(|i| async move {
        read(
            app.post(&format!("old-{i}"), &body(i))
                .send()
                .await
                .unwrap(),
        )
        .await
    }))
    .await;
    assert!(first.iter().all(|(s, _, _)| *s == 201));
    assert_eq!(pg.count("state = 'completed'").await, 20);
    redis.restart();
    assert!(
        eventually(Duration::from_secs(10), async || app
            .readyz()
            .await
            .status()
            == 200)
        .await
    );
    upstream.set_delay(Duration::from_millis(100));

    let keys: Vec<String> = (0..20)
        .flat_map(|i| [format!("old-{i}"), format!("new-{i}")])
        .collect();
    let answers = join_all(keys.iter().map(|key| {
        let i: usize = key[4..].parse().unwrap();
        async move { read(app.post(key, &body(i)).send().await.unwrap()).await }
    }))
    .await;

    for (key, (status, headers, bytes)) in keys.iter().zip(&answers) {
        assert_eq!(*status, 201, "{key}");
        let replayed = headers["idempotent-replayed"] == "true";
        match key[4..]
            .parse::<usize>()
            .ok()
            .filter(|_| key.starts_with("old-"))
        {
            Some(i) => {
                assert!(replayed, "{key} was stored before Redis lost it");
                let (_, h1, b1) = &first[i];
                assert_eq!(bytes, b1, "{key} replays its own body");
                assert_eq!(comparable(headers), comparable(h1), "{key}");
            }
            None => assert!(!replayed, "{key} is new"),
        }
    }
    // 20 first executions before, 20 new keys now, no stored key run again.
    assert_eq!(upstream.executions(), 40);
    let mut executed: Vec<String> = (upstream.seen().iter())
        .map(|s| s.headers["idempotency-key"].to_str().unwrap().to_string())
        .collect();
    executed.sort();
    executed.dedup();
    assert_eq!(executed.len(), 40, "every key executed exactly once");
    let t = tally(&answers);
    assert_eq!((t.first, t.replayed), (20, 20));
}
