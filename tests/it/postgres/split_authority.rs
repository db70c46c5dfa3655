//! `postgres.claims = "redis"` once Redis is back: Redis decides who holds a key. While
//! one replica's breaker is open it claims in Postgres, and another replica may run the
//! same key in Redis meanwhile (that mode's two-authority window, stated in
//! docs/guarantees.md). After the heal every replica must answer what Redis holds: a
//! response this replica completed in Postgres after its view of Redis changed is not
//! kept in its replay cache ("no two replicas serve different responses for
//! one key once the partition has healed").

use std::time::{Duration, Instant};

use crate::support::{
    config, eventually, read, HoldProxy, MockUpstream, PgServer, RedisServer, TestApp,
};

/// A gateway with `claims = "redis"` and the replay cache on, reaching Redis at `redis`.
async fn gateway(redis: &str, pg: &PgServer, upstream: &MockUpstream) -> TestApp {
    let section = pg.section("claims = \"redis\"");
    let mut config = config(redis, &upstream.url(), &section);
    config.replay_cache.max_bytes = bytesize::ByteSize::mib(1);
    config.replay_cache.max_age = Duration::from_secs(600);
    TestApp::spawn(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_after_the_heal_on_a_key_both_tiers_ran() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let proxy = HoldProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let cut_off = gateway(&format!("redis://127.0.0.1:{}", proxy.port), &pg, &upstream).await;
    let direct = gateway(&redis.url(), &pg, &upstream).await;

    // Redis stops answering one replica (requests arrive, replies are held) until its
    // breaker opens; each claim until then times out.
    proxy.hold(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    while !cut_off.breaker_open().await {
        assert!(Instant::now() < deadline, "the breaker did not open");
        let trip = cut_off.post(&format!("trip-{n}"), "{}");
        let _ = trip.timeout(Duration::from_secs(5)).send().await;
        n += 1;
    }

    // The same key on both sides, both executions slow: the direct replica claims it in
    // Redis, the cut-off one (breaker open) in Postgres.
    upstream.set_delay(Duration::from_secs(4));
    let before = upstream.executions();
    let in_redis = tokio::spawn(direct.post("split", "{}").send());
    upstream.until_executions(before + 1).await;
    let in_postgres = tokio::spawn(cut_off.post("split", "{}").send());
    upstream.until_executions(before + 2).await;

    // The heal, before either execution answers: the cut-off replica's claims go to
    // Redis again (its replay cache starts over).
    proxy.hold(false);
    let closed = eventually(Duration::from_secs(3), async || {
        !cut_off.breaker_open().await
    });
    assert!(
        closed.await,
        "the breaker did not close before the executions answered"
    );
    let (s1, _, from_redis) = read(in_redis.await.unwrap().unwrap()).await;
    let (s2, _, from_postgres) = read(in_postgres.await.unwrap().unwrap()).await;
    assert_eq!((s1, s2), (201, 201));
    assert_eq!(
        upstream.executions() - before,
        2,
        "both sides ran the key (the window this test is about)"
    );
    assert_ne!(from_redis, from_postgres);
    upstream.set_delay(Duration::ZERO);

    // Redis holds the direct replica's response; both replicas answer with it, more than
    // once (the second answer of each may come from its replay cache).
    for _ in 0..2 {
        for (name, app) in [("direct", &direct), ("cut off", &cut_off)] {
            let (status, headers, body) = read(app.post("split", "{}").send().await.unwrap()).await;
            assert_eq!(status, 201, "{name}");
            assert_eq!(headers["idempotent-replayed"], "true", "{name}");
            assert_eq!(
                body, from_redis,
                "the {name} replica answers a response Redis does not hold"
            );
        }
    }
    assert_eq!(upstream.executions() - before, 2, "nothing ran again");
}
