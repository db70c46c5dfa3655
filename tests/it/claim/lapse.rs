//! A lease that lapses with no completion: the replica running the key is SIGKILLed, or
//! frozen (SIGSTOP) past `lock_ttl`, while the upstream works. With claims written
//! through to Postgres (the durable default), the row keeps the lapsed lease, and the
//! retry that takes it over knows: with `on_ambiguous = "store"` (the default) it stores
//! `upstream_outcome_unknown` and every retry replays it, so the key never runs twice;
//! with `"release"` the retry runs it again. Concurrent retries store it once; the frozen
//! holder, resumed, has its completion refused and answers the stored outcome. The same
//! holds with claims Redis vouches for (`claims = "vouched"`, no Postgres row): the
//! record outlives its lease in Redis, and the claim that takes it over knows.

use std::path::Path;
use std::time::{Duration, Instant};

use idemgate_fleet::Replica;

use crate::support::{
    comparable, config, eventually, keyed_post, metric, problem_code, read, serve_process,
    MockUpstream, PgServer, RedisServer, TestApp,
};

const LOCK_TTL: Duration = Duration::from_secs(2);
const AMOUNT: &str = r#"{"amount":100}"#;

/// The routes of every gateway here: `payments` (`/v1/`, the default `on_ambiguous`)
/// and `refunds` (`/v2/`, `on_ambiguous = "release"`), after `config`'s first route.
fn routes(up: &MockUpstream) -> String {
    format!(
        "[[routes]]\nname = \"refunds\"\npath_prefix = \"/v2/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"30s\"\n[routes.idempotency]\non_ambiguous = \"release\"\n",
        up.url()
    )
}

/// `postgres.claims`: where the lease lives.
#[derive(Clone, Copy)]
enum Claims {
    /// The default: a Postgres row per claim.
    WriteThrough,
    /// In a Redis that fsyncs every write, alone.
    Vouched,
}

impl Claims {
    fn redis(self) -> RedisServer {
        match self {
            Claims::WriteThrough => RedisServer::start(),
            Claims::Vouched => RedisServer::start_with(idemgate_fleet::DURABLE_REDIS),
        }
    }

    /// The leases in flight are where this mode keeps them: Postgres rows, or none.
    async fn assert_where(self, pg: &PgServer) {
        let rows = pg.count("state = 'leased'").await;
        match self {
            Claims::WriteThrough => assert!(rows > 0, "write-through leases are rows"),
            Claims::Vouched => assert_eq!(rows, 0, "Redis keeps vouched leases alone"),
        }
    }
}

/// `[idempotency]` and `[postgres]` of every gateway here.
fn stores_section(pg: &PgServer, claims: Claims) -> String {
    let claims = match claims {
        Claims::WriteThrough => "",
        Claims::Vouched => "claims = \"vouched\"",
    };
    format!(
        "[idempotency]\nanonymous = \"shared\"\nreplay_set_cookie = true\nlock_ttl = \"{}ms\"\n{}",
        LOCK_TTL.as_millis(),
        pg.section(claims)
    )
}

/// The replica that goes away: an `idemgate serve` process.
async fn doomed(
    dir: &Path,
    (redis, pg, up): (&RedisServer, &PgServer, &MockUpstream),
    claims: Claims,
) -> Replica {
    let toml = format!(
        "[replay_cache]\nmax_bytes = \"0B\"\n[redis]\nurl = \"{}\"\ncommand_timeout = \"300ms\"\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"30s\"\n{}{}",
        redis.url(),
        up.url(),
        routes(up),
        stores_section(pg, claims),
    );
    serve_process(dir, "doomed", &toml).await
}

/// The replica that stays, in-process, with the same settings.
async fn survivor(
    (redis, pg, up): (&RedisServer, &PgServer, &MockUpstream),
    claims: Claims,
) -> TestApp {
    let extra = format!("{}{}", routes(up), stores_section(pg, claims));
    TestApp::spawn(config(&redis.url(), &up.url(), &extra)).await
}

/// How many requests with `key` the upstream got.
fn runs(up: &MockUpstream, key: &str) -> usize {
    (up.seen().iter())
        .filter(|s| s.headers.get("idempotency-key").is_some_and(|k| k == key))
        .count()
}

/// The `idemgate_lapsed_takeovers_total` series `then`, as `app` exports it (the
/// recorder is the process's: a test reads at least what it caused).
async fn lapsed(app: &TestApp, then: &str) -> f64 {
    let series = format!("idemgate_lapsed_takeovers_total{{then=\"{then}\"}}");
    metric(&app.metrics().await, &series)
}

type Answer = (u16, reqwest::header::HeaderMap, bytes::Bytes);

async fn post(client: &reqwest::Client, base: &str, path: &str, key: &str) -> Answer {
    let url = format!("{base}{path}");
    read(keyed_post(client, url, key, AMOUNT).send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replicas_lapsed_lease_is_an_unknown_outcome_never_run_again() {
    killed_holder(Claims::WriteThrough).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replicas_lapsed_vouched_lease_is_an_unknown_outcome_never_run_again() {
    killed_holder(Claims::Vouched).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_holder_resumed_after_the_takeover_answers_the_stored_outcome() {
    frozen_holder(Claims::WriteThrough).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_vouched_holder_resumed_after_the_takeover_answers_the_stored_outcome() {
    frozen_holder(Claims::Vouched).await;
}

async fn killed_holder(claims: Claims) {
    let (redis, pg, up) = (
        claims.redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    up.set_delay(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let mut dead = doomed(dir.path(), (&redis, &pg, &up), claims).await;
    let client = reqwest::Client::new();
    for (path, key) in [("/v1/payments", "kept"), ("/v2/refunds", "freed")] {
        let request = keyed_post(&client, format!("{}{path}", dead.url()), key, AMOUNT);
        // The client goes away with the replica.
        tokio::spawn(async move { drop(request.send().await) });
    }
    let reached = eventually(Duration::from_secs(10), async || up.executions() == 2).await;
    assert!(reached, "the upstream never got both: {}", dead.log_text());
    claims.assert_where(&pg).await;
    dead.kill();
    let killed = Instant::now();
    let app = survivor((&redis, &pg, &up), claims).await;
    let base = format!("http://{}", app.addr);
    let (status, _, _) = post(&client, &base, "/v1/payments", "kept").await;
    assert_eq!(status, 409, "the dead replica's lease still holds the key");

    // Past the lease (its last heartbeat was before the kill): eight retries at once.
    up.set_delay(Duration::ZERO);
    tokio::time::sleep_until((killed + LOCK_TTL + Duration::from_millis(300)).into()).await;
    let at_once = futures_util::future::join_all(
        (0..8).map(|_| post(&client, &base, "/v1/payments", "kept")),
    )
    .await;
    let stored: Vec<&Answer> = at_once.iter().filter(|a| a.0 == 502).collect();
    for (status, headers, body) in &at_once {
        match status {
            502 => assert_eq!(problem_code(headers, body), "upstream_outcome_unknown"),
            409 => assert_eq!(problem_code(headers, body), "idempotency_key_in_flight"),
            other => panic!("a retry got {other}: {body:?}"),
        }
    }
    assert!(!stored.is_empty(), "no retry got the unknown outcome");
    let firsts = (stored.iter())
        .filter(|a| a.1["idempotent-replayed"] == "false")
        .count();
    assert!(firsts <= 1, "{firsts} retries each stored the outcome");
    let later = post(&client, &base, "/v1/payments", "kept").await;
    assert_eq!(
        (later.0, later.1["idempotent-replayed"].to_str().unwrap()),
        (502, "true")
    );
    for (_, headers, body) in &stored {
        assert_eq!(
            (comparable(headers), body),
            (comparable(&later.1), &later.2),
            "every 502 is the stored one"
        );
    }
    assert_eq!(
        runs(&up, "kept"),
        1,
        "the key ran again after its lease lapsed"
    );
    assert!(lapsed(&app, "stored_unknown").await >= 1.0);

    // `on_ambiguous = "release"`: the upstream deduplicates on the key; it runs again.
    let freed = post(&client, &base, "/v2/refunds", "freed").await;
    assert_eq!(
        (freed.0, freed.1["idempotent-replayed"].to_str().unwrap()),
        (201, "false"),
        "{:?}",
        freed.2
    );
    assert_eq!(runs(&up, "freed"), 2);
    assert!(lapsed(&app, "ran_again").await >= 1.0);
}

async fn frozen_holder(claims: Claims) {
    let (redis, pg, up) = (
        claims.redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    // Answers while the holder is frozen; the holder reads it once resumed.
    up.set_delay(LOCK_TTL + Duration::from_secs(1));
    let dir = tempfile::tempdir().unwrap();
    let frozen = doomed(dir.path(), (&redis, &pg, &up), claims).await;
    let client = reqwest::Client::new();
    let first = tokio::spawn({
        let (client, base) = (client.clone(), frozen.url());
        async move { post(&client, &base, "/v1/payments", "frozen").await }
    });
    let reached = eventually(Duration::from_secs(10), async || up.executions() == 1).await;
    assert!(reached, "the upstream never got it: {}", frozen.log_text());
    claims.assert_where(&pg).await;
    frozen.signal("STOP");
    let stopped = Instant::now();
    let app = survivor((&redis, &pg, &up), claims).await;
    let base = format!("http://{}", app.addr);
    tokio::time::sleep_until((stopped + LOCK_TTL + Duration::from_millis(300)).into()).await;
    let retry = post(&client, &base, "/v1/payments", "frozen").await;
    assert_eq!(
        (retry.0, problem_code(&retry.1, &retry.2).as_str()),
        (502, "upstream_outcome_unknown"),
        "the retry after the lapse"
    );
    frozen.signal("CONT");
    let (status, headers, body) = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the resumed holder never answered")
        .unwrap();
    assert_eq!(
        (status, comparable(&headers), &body),
        (502, comparable(&retry.1), &retry.2),
        "the resumed holder's client got another answer than the stored one; its log:\n{}",
        frozen.log_text()
    );
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(runs(&up, "frozen"), 1);
}
