//! `Idempotency-Expires`: on every answer that stores a record (the first and each
//! replay, the same value), absent on answers that store nothing, configurable
//! (`expires_header`), and honoured to the second by every tier: a retry just before
//! the moment replays, one just after runs afresh, from Redis and after a Redis flush
//! from Postgres (whose re-warming never extends a record).

use std::time::{Duration, SystemTime};

use crate::support::{
    config, durable_stack, problem_code, read, stack, MockUpstream, RedisServer, TestApp,
};

/// The moment an answer advertises.
fn expires(headers: &reqwest::header::HeaderMap) -> SystemTime {
    let value = headers["idempotency-expires"].to_str().unwrap();
    httpdate::parse_http_date(value).unwrap_or_else(|e| panic!("{value}: {e}"))
}

/// Sleeps until `offset` past (or, negative, before) `moment`.
async fn sleep_until(moment: SystemTime, offset_ms: i64) {
    let target = match offset_ms >= 0 {
        true => moment + Duration::from_millis(offset_ms as u64),
        false => moment - Duration::from_millis(offset_ms.unsigned_abs()),
    };
    if let Ok(wait) = target.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
}

/// `ttl` and `lock_ttl` of the records that expire during a test.
const SHORT_TTL: &str = "[idempotency]\nttl = \"3s\"\nlock_ttl = \"2s\"\n";

#[tokio::test]
async fn the_first_answer_and_every_replay_carry_the_same_expiry() {
    let (_redis, upstream, app) = stack("").await;
    let before = SystemTime::now();
    let (status, first, _) = read(app.post("exp-1", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    let moment = expires(&first);
    let ahead = moment.duration_since(before).unwrap();
    // The default ttl (24 h), rounded up to a whole second.
    let day = Duration::from_secs(24 * 3600);
    assert!(
        ahead >= day && ahead <= day + Duration::from_secs(2),
        "{ahead:?}"
    );
    for _ in 0..2 {
        // Real time: the same moment, however late the replay.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (status, replay, _) = read(app.post("exp-1", "{}").send().await.unwrap()).await;
        assert_eq!(
            (status, &replay["idempotent-replayed"]),
            (201, &"true".parse().unwrap())
        );
        assert_eq!(replay["idempotency-expires"], first["idempotency-expires"]);
    }
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn answers_that_store_nothing_carry_no_expiry() {
    let (_redis, upstream, app) = stack("").await;
    // The upstream sends one of its own ("execution=N"): only the gateway's is told.
    upstream.set_exchange_headers(&["idempotency-expires"]);
    // A release status: passed on, not stored.
    upstream.push_statuses(&[503]);
    let (status, headers, _) = read(app.post("exp-503", "{}").send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert!(!headers.contains_key("idempotency-expires"), "{headers:?}");
    // Unkeyed: nothing stored either.
    let unkeyed = app
        .client
        .post(app.url("/v1/payments"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unkeyed.status(), 201);
    assert!(!unkeyed.headers().contains_key("idempotency-expires"));
    // Stored: the gateway's date replaces the upstream's value.
    let (_, headers, _) = read(app.post("exp-own", "{}").send().await.unwrap()).await;
    assert_eq!(headers.get_all("idempotency-expires").iter().count(), 1);
    expires(&headers);
    // In flight: nothing stored yet.
    upstream.set_delay(Duration::from_millis(800));
    let slow = app.post("exp-409", "{}").send();
    let slow = tokio::spawn(slow);
    upstream.until_executions(4).await;
    let (status, headers, body) = read(app.post("exp-409", "{}").send().await.unwrap()).await;
    assert_eq!(problem_code(&headers, &body), "idempotency_key_in_flight");
    assert_eq!(status, 409);
    assert!(!headers.contains_key("idempotency-expires"));
    let (status, headers, _) = read(slow.await.unwrap().unwrap()).await;
    assert_eq!(status, 201);
    assert!(headers.contains_key("idempotency-expires"), "it stored one");
}

#[tokio::test]
async fn the_header_can_be_renamed_or_left_out_per_route() {
    let (_redis, _upstream, app) =
        stack("[routes.idempotency]\nexpires_header = \"X-Key-Expires\"\n").await;
    let (_, headers, _) = read(app.post("renamed", "{}").send().await.unwrap()).await;
    assert!(headers.contains_key("x-key-expires"));
    assert!(!headers.contains_key("idempotency-expires"));
    let (_redis, _upstream, app) = stack("[routes.idempotency]\nexpires_header = false\n").await;
    let (status, headers, _) = read(app.post("off", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
    assert!(!headers.contains_key("idempotency-expires"));
}

#[tokio::test]
async fn redis_replays_until_the_advertised_second_and_not_after() {
    let (_redis, upstream, app) = stack(SHORT_TTL).await;
    let (_, first, _) = read(app.post("exp-redis", "{}").send().await.unwrap()).await;
    let moment = expires(&first);
    sleep_until(moment, -400).await;
    let (status, headers, _) = read(app.post("exp-redis", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"true".parse().unwrap())
    );
    sleep_until(moment, 250).await;
    let (status, headers, _) = read(app.post("exp-redis", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (201, &"false".parse().unwrap()),
        "past the advertised expiry the key runs afresh"
    );
    assert!(expires(&headers) > moment);
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn postgres_replays_until_the_advertised_second_and_rewarming_never_extends_it() {
    for claims in ["write_through", "redis"] {
        let (redis, _pg, upstream, app) =
            durable_stack(&format!("claims = \"{claims}\""), SHORT_TTL).await;
        let key = format!("exp-pg-{claims}");
        let (_, first, _) = read(app.post(&key, "{}").send().await.unwrap()).await;
        let moment = expires(&first);
        // Just before: Redis forgot it; Postgres replays it and re-warms Redis.
        redis.cli(&["FLUSHALL"]);
        sleep_until(moment, -400).await;
        let (status, headers, _) = read(app.post(&key, "{}").send().await.unwrap()).await;
        assert_eq!(
            (status, &headers["idempotent-replayed"]),
            (201, &"true".parse().unwrap())
        );
        assert_eq!(
            headers["idempotency-expires"], first["idempotency-expires"],
            "{claims}"
        );
        // Just after: neither the re-warmed Redis record nor the row replays it.
        sleep_until(moment, 250).await;
        let (status, headers, _) = read(app.post(&key, "{}").send().await.unwrap()).await;
        assert_eq!(
            (status, &headers["idempotent-replayed"]),
            (201, &"false".parse().unwrap()),
            "{claims}: past the advertised expiry the key runs afresh"
        );
        // And once more after a flush, now from Postgres alone.
        let moment = expires(&headers);
        redis.cli(&["FLUSHALL"]);
        sleep_until(moment, 250).await;
        let (status, headers, _) = read(app.post(&key, "{}").send().await.unwrap()).await;
        assert_eq!(
            (status, &headers["idempotent-replayed"]),
            (201, &"false".parse().unwrap()),
            "{claims}: the row is not replayed past its expiry"
        );
        assert_eq!(upstream.executions(), 3, "{claims}");
    }
}

#[tokio::test]
async fn the_replay_cache_keeps_a_record_no_longer_than_its_expiry() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let mut cfg = config(&redis.url(), &upstream.url(), SHORT_TTL);
    cfg.replay_cache.max_bytes = bytesize::ByteSize::mib(1);
    let app = TestApp::spawn(cfg).await;
    let (_, first, _) = read(app.post("exp-cache", "{}").send().await.unwrap()).await;
    let moment = expires(&first);
    sleep_until(moment, -400).await;
    let (_, headers, _) = read(app.post("exp-cache", "{}").send().await.unwrap()).await;
    assert_eq!(headers["idempotent-replayed"], "true");
    sleep_until(moment, 250).await;
    let (_, headers, _) = read(app.post("exp-cache", "{}").send().await.unwrap()).await;
    assert_eq!(headers["idempotent-replayed"], "false");
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn a_claimed_record_completed_past_its_expiry_is_not_kept_for_the_claims_ttl() {
    use idemgate::testing::store::postgres::claim_asks::ClaimAsk;
    use idemgate::testing::store::postgres::claim_rounds::ClaimRounds;
    use idemgate::testing::store::postgres::PgClaim;

    use crate::support::records::{completed, fingerprint, rec, store};
    use crate::support::PgServer;

    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let claims = ClaimRounds::spawn(s.clone(), 16);
    // The claim writes lease + ttl as the row's expiry (for the reaper, and so that
    // the completion is a HOT update); the record itself lives only to its expiry.
    let hour = Duration::from_secs(3600);
    let ask = ClaimAsk::new(rec("late"), &fingerprint(""), "t", hour).living(hour);
    assert!(matches!(
        claims.claim_ask(ask).await.unwrap(),
        PgClaim::Acquired { .. }
    ));
    // A copy with nothing left (an expiry that passed before the write).
    assert_eq!(
        s.complete_batch(&[completed("late", 0)]).await.unwrap(),
        vec![true]
    );
    assert!(
        s.lookup(rec("late")).await.unwrap().is_none(),
        "replayed past its expiry"
    );
    let expired = pg.count("expires_at <= now()").await;
    assert_eq!(
        expired, 1,
        "the reaper's expiry is now, not the claim's lease + ttl"
    );
}

/// A row the previous release completed again after this one had (0.4.0 takes over a
/// row only once its `expires_at` passed and leaves `replay_until` as it was): its
/// stale `replay_until`, earlier than its completion, is not its expiry.
#[tokio::test]
async fn a_replay_until_older_than_the_rows_completion_is_not_its_expiry() {
    use idemgate::testing::store::postgres::claim_asks::ClaimAsk;
    use idemgate::testing::store::postgres::claim_rounds::ClaimRounds;
    use idemgate::testing::store::postgres::{Found, PgClaim};

    use crate::support::records::{completed, fingerprint, rec, store};
    use crate::support::PgServer;

    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    assert_eq!(
        s.complete_batch(&[completed("mixed", 3_600_000)])
            .await
            .unwrap(),
        vec![true]
    );
    let stale = "UPDATE idemgate_records SET replay_until = completed_at - interval '1 hour'";
    pg.client().await.execute(stale, &[]).await.unwrap();
    let found = s.lookup(rec("mixed")).await.unwrap();
    assert!(matches!(found, Some(Found::Completed { .. })), "{found:?}");
    let claims = ClaimRounds::spawn(s.clone(), 16);
    let hour = Duration::from_secs(3600);
    let ask = ClaimAsk::new(rec("mixed"), &fingerprint(""), "another", hour).living(hour);
    let claimed = claims.claim_ask(ask).await.unwrap();
    assert!(
        !matches!(claimed, PgClaim::Acquired { .. }),
        "taken over: {claimed:?}"
    );
}
