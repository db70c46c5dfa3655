//! `postgres.claims = "vouched"`: a claim Redis keeps durable (AOF `appendfsync always`)
//! takes no Postgres row, one Redis cannot vouch for (no AOF) takes one, and a Redis
//! that lost a key's slot while its holder still ran answers "in flight" for the key
//! until the holder's heartbeat wrote its lease back, so the key runs once.

use std::time::{Duration, Instant};

use crate::redis::record_key;
use crate::support::holdproxy::HoldProxy;
use crate::support::{
    config, eventually, keyed_post, read, MockUpstream, PgServer, RedisServer, TestApp,
};

pub(super) const LOCK_TTL: Duration = Duration::from_millis(1500);
/// `LOCK_TTL` and the command timeout (`Config::epoch_quarantine`).
pub(super) const QUARANTINE: Duration = Duration::from_millis(1800);
const AMOUNT: &str = r#"{"amount":100}"#;

/// A Redis that fsyncs every write before it answers.
pub(super) fn fsyncing_redis() -> RedisServer {
    RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
}

/// A replica of `primary`, run as vouched claims rely on, once it follows the primary.
pub(super) async fn replica_of(primary: &RedisServer) -> RedisServer {
    replica_via(primary, primary.port).await
}

/// A replica of `primary` that connects to it at `port` (a proxy's).
async fn replica_via(primary: &RedisServer, port: u16) -> RedisServer {
    let port = port.to_string();
    let mut args = idemgate_fleet::DURABLE_REDIS.to_vec();
    args.extend(["--replicaof", "127.0.0.1", &port]);
    let replica = RedisServer::start_with(&args);
    let synced = eventually(Duration::from_secs(10), async || {
        primary.info("connected_slaves").as_deref() == Some("1")
            && replica.info("master_link_status").as_deref() == Some("up")
    })
    .await;
    assert!(synced, "the replica follows the primary");
    replica
}

pub(super) async fn gateway(redis: &RedisServer, pg: &PgServer, up: &MockUpstream) -> TestApp {
    gateway_with(redis, pg, up, "").await
}

/// [`gateway`] with `tables` (TOML tables of its own, e.g. `[admin]`) in its configuration.
pub(super) async fn gateway_with(
    redis: &RedisServer,
    pg: &PgServer,
    up: &MockUpstream,
    tables: &str,
) -> TestApp {
    let extra = format!(
        "[idempotency]\nlock_ttl = \"{}ms\"\n{tables}{}",
        LOCK_TTL.as_millis(),
        pg.section("claims = \"vouched\"")
    );
    TestApp::spawn(config(&redis.url(), &up.url(), &extra)).await
}

/// What `/readyz` says of the one shard's claims: `kept_by_redis`, or
/// `written_through` and why.
pub(super) async fn claim_path(app: &TestApp) -> String {
    let body: serde_json::Value = app.readyz().await.json().await.unwrap();
    let path = &body["claim_path"];
    assert_eq!(path["mode"], "vouched", "{body}");
    let shard = &path["shards"][0];
    match shard["why"].as_str() {
        Some(why) => format!("{} ({why})", shard["claims"].as_str().unwrap()),
        None => shard["claims"].as_str().unwrap().to_string(),
    }
}

pub(super) async fn leased_rows(pg: &PgServer) -> i64 {
    pg.count("state = 'leased'").await
}

/// Whether a claim of a fresh key, posted to the slow upstream `up`, is soon kept by Redis
/// alone (no leased Postgres row while it runs): tried again until `within`.
pub(super) async fn until_kept(
    app: &TestApp,
    pg: &PgServer,
    up: &MockUpstream,
    within: Duration,
) -> bool {
    eventually(within, async || {
        let key = format!("first-{}", uuid::Uuid::new_v4());
        let (status, leased) = leased_during(app, pg, up, &key).await;
        assert_eq!(status, 201, "{key}");
        leased == 0
    })
    .await
}

/// Posts `key` (to a slow upstream `up`) and counts Postgres' leased rows once the call
/// reached `up`, so once its claim was made: the status, and the rows while it ran.
pub(super) async fn leased_during(
    app: &TestApp,
    pg: &PgServer,
    up: &MockUpstream,
    key: &str,
) -> (u16, i64) {
    let before = up.executions();
    let during = async {
        up.until_executions(before + 1).await;
        leased_rows(pg).await
    };
    let ((status, _), leased) = tokio::join!(post(app, key), during);
    (status, leased)
}

/// Posts `key` with `AMOUNT`; the status and body.
pub(super) async fn post(app: &TestApp, key: &str) -> (u16, bytes::Bytes) {
    let client = reqwest::Client::new();
    let (status, _, body) = read(
        keyed_post(&client, app.url("/v1/pay"), key, AMOUNT)
            .send()
            .await
            .unwrap(),
    )
    .await;
    (status, body)
}

/// A gateway on `redis` that stored "before-the-loss", then `redis` restarted empty:
/// the stores, the gateway and the stored answer.
async fn stored_then_emptied(
    mut redis: RedisServer,
) -> (RedisServer, PgServer, MockUpstream, TestApp, bytes::Bytes) {
    let (pg, up) = (PgServer::start(), MockUpstream::start().await);
    let app = gateway(&redis, &pg, &up).await;
    let (status, stored) = post(&app, "before-the-loss").await;
    assert_eq!(status, 201);
    redis.restart_empty();
    (redis, pg, up, app, stored)
}

#[tokio::test]
async fn a_claim_redis_keeps_takes_no_postgres_row_and_runs_once() {
    let (redis, pg, up) = (
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let app = gateway(&redis, &pg, &up).await;
    // A new deployment wrote every slot's epoch marker: a first claim does not wait.
    let started = Instant::now();
    let (status, first) = post(&app, "vouched-fast").await;
    assert_eq!(status, 201);
    assert!(started.elapsed() < QUARANTINE, "{:?}", started.elapsed());
    assert_eq!(
        pg.count("true").await,
        1,
        "the completed record, written through"
    );

    // While the call runs, Postgres holds no claim row; eight duplicates run nothing.
    up.set_delay(Duration::from_millis(800));
    let calls = (0..8).map(|_| post(&app, "vouched-slow"));
    let during = async {
        up.until_executions(2).await;
        leased_rows(&pg).await
    };
    let (answers, leased) = tokio::join!(futures_util::future::join_all(calls), during);
    assert_eq!(leased, 0, "a claim redis keeps needs no postgres row");
    let stored: Vec<_> = answers.iter().filter(|(s, _)| *s == 201).collect();
    assert!(!stored.is_empty(), "{answers:?}");
    assert!(
        stored.iter().all(|a| a.1 == stored[0].1),
        "one answer per key"
    );
    assert!(
        answers.iter().all(|(s, _)| matches!(s, 201 | 409)),
        "{answers:?}"
    );
    assert_eq!(up.executions(), 2, "one execution per key");
    // A retry replays byte for byte.
    assert_eq!(post(&app, "vouched-fast").await, (201, first));
    assert_eq!(up.executions(), 2);
}

#[tokio::test]
async fn a_redis_that_does_not_fsync_every_write_gets_a_postgres_row() {
    let (redis, pg, up) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let app = gateway(&redis, &pg, &up).await;
    up.set_delay(Duration::from_millis(800));
    let (status, leased) = leased_during(&app, &pg, &up, "unvouched").await;
    assert_eq!(status, 201);
    assert_eq!(
        leased, 1,
        "redis without appendfsync always: the claim is written through"
    );
    assert_eq!(claim_path(&app).await, "written_through (no_fsync)");

    // Redis turns it on: the probe reads it, and the next claims keep to Redis.
    redis.cli(&["CONFIG", "SET", "appendonly", "yes"]);
    redis.cli(&["CONFIG", "SET", "appendfsync", "always"]);
    let kept = eventually(Duration::from_secs(5), async || {
        let key = format!("vouched-{}", uuid::Uuid::new_v4());
        leased_during(&app, &pg, &up, &key).await == (201, 0)
    })
    .await;
    assert_eq!(claim_path(&app).await, "kept_by_redis");
    assert!(
        kept,
        "once redis fsyncs every write, claims take no postgres row"
    );
}

#[tokio::test]
async fn a_redis_restarted_without_its_data_serves_again_after_the_quarantine() {
    let (_redis, _pg, up, app, stored) = stored_then_emptied(fsyncing_redis()).await;
    // Every key is absent from slots that lost their data: in flight, for now.
    let during = post(&app, "a-new-key").await.0;
    assert_eq!(
        during, 409,
        "a key absent from a slot that just lost its data"
    );
    assert_eq!(
        post(&app, "before-the-loss").await,
        (201, stored.clone()),
        "a stored answer replays from Postgres during the quarantine too"
    );
    tokio::time::sleep(QUARANTINE + Duration::from_millis(200)).await; // real time: it runs out
    assert_eq!(post(&app, "a-new-key").await.0, 201, "after the quarantine");
    assert_eq!(
        post(&app, "before-the-loss").await,
        (201, stored),
        "a stored answer Redis lost replays from Postgres"
    );
    assert_eq!(up.executions(), 2);
}

#[tokio::test]
async fn a_redis_that_never_kept_a_claim_alone_serves_at_once_after_losing_its_data() {
    // No AOF: every claim is written through, and no epoch marker is ever recorded.
    let (_redis, pg, up, app, stored) = stored_then_emptied(RedisServer::start()).await;
    // Postgres arbitrated every earlier claim: a new key waits out no quarantine, and
    // its concurrent duplicates still run it once.
    let started = Instant::now();
    up.set_delay(Duration::from_millis(500));
    let calls = (0..6).map(|_| post(&app, "after-the-loss"));
    let answers = futures_util::future::join_all(calls).await;
    assert!(started.elapsed() < QUARANTINE, "{:?}", started.elapsed());
    assert_eq!(
        answers.iter().filter(|(s, _)| *s == 201).count(),
        1,
        "served at once, and once: {answers:?}"
    );
    assert!(
        answers.iter().all(|(s, _)| matches!(s, 201 | 409)),
        "{answers:?}"
    );
    assert_eq!(
        post(&app, "before-the-loss").await,
        (201, stored),
        "a stored answer Redis lost replays from Postgres"
    );
    assert_eq!(up.executions(), 2, "one execution per key");
    let epochs = pg.client().await;
    let recorded = (epochs.query_one("SELECT count(*) FROM idemgate_redis_epochs", &[]))
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(
        recorded, 0,
        "no claim could be kept alone: no markers recorded"
    );
}

#[tokio::test]
async fn a_claim_no_replica_acknowledges_gets_a_postgres_row() {
    let (redis, pg, up) = (
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let replica = replica_of(&redis).await;
    let app = gateway(&redis, &pg, &up).await;
    up.set_delay(Duration::from_millis(800));
    let leased_during = async |key: &str| {
        let (status, leased) = leased_during(&app, &pg, &up, key).await;
        assert_eq!(status, 201, "{key}");
        leased
    };
    assert_eq!(
        leased_during("acknowledged").await,
        0,
        "WAIT 1 counted the replica"
    );
    // The replica stops answering: the claim's WAIT comes back short, so Postgres holds it.
    replica.pause();
    assert_eq!(
        leased_during("unacknowledged").await,
        1,
        "no replica: a postgres row"
    );
    assert_eq!(leased_during("still-unacknowledged").await, 1);
    assert_eq!(claim_path(&app).await, "written_through (wait_short)");
    replica.resume();
    let kept = eventually(Duration::from_secs(10), async || {
        leased_during(&format!("back-{}", uuid::Uuid::new_v4())).await == 0
    })
    .await;
    assert!(
        kept,
        "once the replica acknowledges again, claims are kept by redis"
    );
}

/// A round vouches only for the server its claims were written to: a claim whose round
/// was cut short by its connections being re-made to another server behind the same
/// address (a failover), where the round's probe and `WAIT` could be answered at once,
/// takes a Postgres row.
#[tokio::test]
async fn a_round_cut_short_by_a_switch_of_server_vouches_for_nothing() {
    let (a, b, pg, up) = (
        fsyncing_redis(),
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    // A's replica follows through a proxy that can hold the stream: A's rounds wait.
    let link = HoldProxy::start(([127, 0, 0, 1], a.port).into()).await;
    let _a_replica = replica_via(&a, link.port).await;
    let _b_replica = replica_of(&b).await;
    let front = HoldProxy::start(([127, 0, 0, 1], a.port).into()).await;
    let mut cfg = config(
        &format!("redis://127.0.0.1:{}", front.port),
        &up.url(),
        &pg.section("claims = \"vouched\""),
    );
    cfg.redis.command_timeout = Duration::from_secs(3);
    cfg.redis.replica_ack_timeout = Duration::from_secs(2);
    let app = TestApp::spawn(cfg).await;
    up.set_delay(Duration::from_millis(1000));
    let kept = until_kept(&app, &pg, &up, Duration::from_secs(10)).await;
    assert!(kept, "A and its replica vouch for claims");
    link.hold(true);
    let switch = async {
        // Once the claim is on A (its round held), A's clients are cut; back via the front to B.
        let on_a = async || a.cli(&["EXISTS", &record_key("switched")]).trim() == "1";
        assert!(eventually(Duration::from_secs(5), on_a).await, "not on A");
        front.retarget(([127, 0, 0, 1], b.port).into());
        a.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    };
    let (switched, ()) = tokio::join!(leased_during(&app, &pg, &up, "switched"), switch);
    assert_eq!(
        switched,
        (201, 1),
        "the claim was written to A; B's replica acknowledging B's probe says nothing of it"
    );
}
