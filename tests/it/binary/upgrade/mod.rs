//! A rolling upgrade: the previous release's binary and this one in one fleet, on one
//! Redis and one Postgres, behind HAProxy (`make upgrade-check`; `#[ignore]`d in a plain
//! `cargo test`, which has no previous binary). The previous binary is built by
//! `tests/upgrade/build-base.sh` from the commit pinned in `tests/upgrade/base-commit`
//! and passed as `IDEMGATE_PREVIOUS_BIN`.
//!
//! What must hold while two versions share the stores: a key first executed by either
//! version replays byte-identical from the other, from Redis and (after Redis lost
//! everything) from Postgres, sealed with `[encryption]`; concurrent duplicates through
//! the load balancer run the upstream once per key; duplicates waiting on one replica
//! are woken by a completion on the other (well before `wait_timeout`). Records of the
//! layout before the previous release's (hashes, written by both versions with
//! `redis.record_format = "hash"`) still replay once only current replicas run, on the
//! default "string". With write-through claims, the upgrade goes on to
//! `postgres.redis_fill = "on_replay"`, switched replica by replica: at each step (two
//! versions; this one on both settings; on_replay alone) replays cross replicas and
//! concurrent duplicates run once, woken on either replica. The upgrade to this
//! release's default claims (vouched) is `upgrade_vouched.rs`.
//!
//! The configuration is one file both binaries accept: `check-config` of each is run on
//! it first, so a schema change between the two fails here, naming the key, instead of
//! as a replica that never became ready.

mod fleet;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{comparable, tally, Answer, MockUpstream, PgServer, RedisServer};

pub(super) use fleet::{previous_binary, Fleet, Spec};

pub(super) const CURRENT: &str = env!("CARGO_BIN_EXE_idemgate");
/// How long the upstream takes: duplicates sent together overlap the first execution.
const UPSTREAM_DELAY: Duration = Duration::from_millis(400);
const WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The `[redis]` line that writes the layout before the previous release's.
const HASH: &str = "record_format = \"hash\"\n";
/// `[postgres]` lines: claims in Redis, every new key looked up in Postgres.
const REDIS_CLAIMS: &str = "claims = \"redis\"\nlookup_on_miss = \"always\"";
/// `[postgres]` lines: write-through claims (the previous release's default), Redis filled
/// at completion.
const WRITE_THROUGH: &str = "claims = \"write_through\"";
/// `[postgres]` lines: write-through claims, Redis filled on replay.
const FILL_ON_REPLAY: &str = "claims = \"write_through\"\nredis_fill = \"on_replay\"";

/// Two answers are the same stored response: status, headers (but the per-exchange
/// ones), body.
fn same(a: &Answer, b: &Answer) -> bool {
    a.0 == b.0 && comparable(&a.1) == comparable(&b.1) && a.2 == b.2
}

fn replayed(a: &Answer) -> bool {
    a.1.get("idempotent-replayed").is_some_and(|v| v == "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn previous_and_current_release_share_one_fleet() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let previous = previous_binary();
    let bins = [
        (previous.as_path(), "", REDIS_CLAIMS),
        (Path::new(CURRENT), "", REDIS_CLAIMS),
    ];
    let fleet = Fleet::start(&redis, &pg, &upstream, &bins).await;
    let (old, new) = (fleet.replicas[0].url(), fleet.replicas[1].url());
    // The start-up's unkeyed GETs reached the upstream too.
    let before = upstream.executions();

    // 1. Executed by one version, replayed byte-identical by the other (from Redis).
    let firsts = replays_across(&fleet, "cross", 5).await;
    let executed = upstream.executions();
    assert_eq!(executed - before, 20, "one execution per (tenant, key)");

    // 2. Concurrent duplicates through HAProxy (round robin over both versions), the
    //    upstream slow enough that they overlap: one execution per key; every duplicate
    //    waits (on either version) and is woken by the completion, on either version.
    bursts_run_once(&fleet, &upstream, "burst").await;

    // 3. Redis lost everything: each version replays the other's records from Postgres.
    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    for (key, first, a) in &firsts {
        let other = if *first == old { &new } else { &old };
        let b = fleet.post(other, key, "t1").await;
        assert!(
            replayed(&b) && same(a, &b),
            "{key} executed by {first} did not replay from Postgres via {other}: {b:?}\n{}",
            fleet.logs()
        );
    }
    assert_eq!(upstream.executions(), executed + 12, "nothing ran again");
}

/// Twelve bursts of six concurrent duplicates through HAProxy, the upstream slow enough
/// that they overlap: one execution per key, every duplicate waits (on either replica)
/// and is woken well before `wait_timeout` with the same answer.
pub(super) async fn bursts_run_once(fleet: &Fleet, upstream: &MockUpstream, prefix: &str) {
    upstream.set_delay(UPSTREAM_DELAY);
    let executed = upstream.executions();
    let started = Instant::now();
    let front = fleet.haproxy.url();
    let keys: Vec<String> = (0..12).map(|k| format!("{prefix}-{k}")).collect();
    let bursts = keys
        .iter()
        .map(|key| futures_util::future::join_all((0..6).map(|_| fleet.post(&front, key, "t1"))));
    let bursts = futures_util::future::join_all(bursts).await;
    let took = started.elapsed();
    eprintln!("upgrade-check: 12 bursts of 6 duplicates ({prefix}) answered in {took:?}");
    for (k, answers) in bursts.iter().enumerate() {
        let t = tally(answers);
        assert_eq!(
            (t.first, t.replayed, t.in_flight),
            (1, 5, 0),
            "{prefix}-{k}: {t:?}\n{}",
            fleet.logs()
        );
        assert!(
            answers.iter().all(|a| same(a, &answers[0])),
            "{prefix}-{k}: answers differ"
        );
    }
    assert_eq!(
        upstream.executions(),
        executed + 12,
        "one execution per burst key"
    );
    // Woken, not timed out: well under `wait_timeout` (the lease is 30 s).
    assert!(
        took < WAIT_TIMEOUT / 2,
        "the bursts took {took:?}: waiters were not woken"
    );
    upstream.set_delay(Duration::ZERO);
}

/// `per_side` keys first executed on each replica replay byte-identical from the other
/// one, and another tenant's same key is its own record, on either; each key with the
/// replica that executed it and its answer.
pub(super) async fn replays_across(
    fleet: &Fleet,
    prefix: &str,
    per_side: usize,
) -> Vec<(String, String, Answer)> {
    let urls: Vec<String> = fleet.replicas.iter().map(|r| r.url()).collect();
    let mut firsts = Vec::new();
    for (i, (first, second)) in [(&urls[0], &urls[1]), (&urls[1], &urls[0])]
        .into_iter()
        .enumerate()
    {
        for k in 0..per_side {
            let key = format!("{prefix}-{i}-{k}");
            let a = fleet.post(first, &key, "t1").await;
            let b = fleet.post(second, &key, "t1").await;
            assert_eq!(a.0, 201, "{key}: {a:?}\n{}", fleet.logs());
            assert!(
                replayed(&b) && same(&a, &b),
                "{key} executed by {first} did not replay from {second}: {a:?} / {b:?}\n{}",
                fleet.logs()
            );
            let other = fleet.post(second, &key, "t2").await;
            assert!(
                !replayed(&other) && other.2 != a.2,
                "{key}: replayed across tenants"
            );
            firsts.push((key, first.clone(), a));
        }
    }
    firsts
}

/// The upgrade with write-through claims and then `redis_fill = "on_replay"` switched
/// on replica by replica, as CHANGELOG's upgrade step says: the previous release beside
/// this one (both filling at completion), then this one on both settings, then on
/// `on_replay` alone. At every step: replays across the two replicas, and concurrent
/// duplicates through HAProxy run once and are woken on either replica (a replica still
/// filling at completion confirms in Postgres what the other completed there only).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn the_redis_fill_switch_rolls_through_a_mixed_fleet() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let previous = previous_binary();
    let steps = switch_steps(&previous, FILL_ON_REPLAY);
    let leases = async || {
        let states = redis.record_states().await;
        states
            .iter()
            .filter(|(_, s)| s.as_deref() == Some("L"))
            .count()
    };
    for (step, bins) in &steps {
        let fleet = Fleet::start(&redis, &pg, &upstream, bins).await;
        let (before, leased) = (upstream.executions(), leases().await);
        replays_across(&fleet, &format!("{step}-cross"), 4).await;
        bursts_run_once(&fleet, &upstream, &format!("{step}-burst")).await;
        let ran = upstream.executions() - before;
        assert_eq!(
            ran,
            2 * 2 * 4 + 12,
            "{step}: one execution per (tenant, key)"
        );
        // Filled on replay indeed once a replica is: its completions left their leases.
        let grew = leases().await > leased;
        assert_eq!(grew, *step != "versions", "{step}: leases left standing");
    }
}

/// The steps of an upgrade that goes on to the `[postgres]` lines `to`, replica by
/// replica: the previous release beside this one (write-through claims), then this one
/// on write-through and on `to`, then on `to` alone.
pub(super) fn switch_steps<'a>(
    previous: &'a Path,
    to: &'a str,
) -> [(&'static str, [Spec<'a>; 2]); 3] {
    let current = Path::new(CURRENT);
    [
        (
            "versions",
            [(previous, "", WRITE_THROUGH), (current, "", WRITE_THROUGH)],
        ),
        (
            "settings",
            [(current, "", WRITE_THROUGH), (current, "", to)],
        ),
        ("switched", [(current, "", to), (current, "", to)]),
    ]
}

/// Every record in Redis is a hash: the layout the previous release reads.
async fn assert_all_hashes(redis: &RedisServer) {
    let records = redis.records().await;
    assert!(!records.is_empty());
    for key in records {
        assert_eq!(redis.cli(&["TYPE", &key]).trim(), "hash", "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn after_the_upgrade_string_replicas_replay_both_layouts() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    // Both versions writing the layout before the previous release's.
    let previous = previous_binary();
    let during = [
        (previous.as_path(), HASH, REDIS_CLAIMS),
        (Path::new(CURRENT), HASH, REDIS_CLAIMS),
    ];
    let mut firsts = Vec::new();
    {
        let fleet = Fleet::start(&redis, &pg, &upstream, &during).await;
        for (i, replica) in fleet.replicas.iter().enumerate() {
            for k in 0..4 {
                let key = format!("during-{i}-{k}");
                let a = fleet.post(&replica.url(), &key, "t1").await;
                assert_eq!(a.0, 201, "{key}: {a:?}\n{}", fleet.logs());
                firsts.push((key, a));
            }
        }
        assert_all_hashes(&redis).await;
    }
    // After it: current replicas only, on the default "string".
    let current = Path::new(CURRENT);
    let after = [(current, "", REDIS_CLAIMS), (current, "", REDIS_CLAIMS)];
    let fleet = Fleet::start(&redis, &pg, &upstream, &after).await;
    let urls: Vec<String> = fleet.replicas.iter().map(|r| r.url()).collect();
    for (key, a) in &firsts {
        for url in &urls {
            let b = fleet.post(url, key, "t1").await;
            assert!(
                replayed(&b) && same(a, &b),
                "{key} (a hash) did not replay from {url}: {b:?}\n{}",
                fleet.logs()
            );
        }
    }
    for k in 0..4 {
        let key = format!("after-{k}");
        let a = fleet.post(&urls[k % 2], &key, "t1").await;
        let b = fleet.post(&urls[(k + 1) % 2], &key, "t1").await;
        assert!(
            a.0 == 201 && replayed(&b) && same(&a, &b),
            "{key}: {a:?} / {b:?}"
        );
    }
    // Keyed executions only (the start-ups' unkeyed GETs reach the upstream too).
    let ran = |prefix: &str| {
        let needle = format!("\"key\":\"{prefix}");
        (upstream.seen().iter())
            .filter(|s| String::from_utf8_lossy(&s.body).contains(&needle))
            .count()
    };
    assert_eq!(
        (ran("during-"), ran("after-")),
        (8, 4),
        "only the new keys ran"
    );
    let mut layouts: Vec<String> = Vec::new();
    for key in redis.records().await {
        layouts.push(redis.cli(&["TYPE", &key]).trim().to_string());
    }
    layouts.sort();
    let count = |t: &str| layouts.iter().filter(|l| *l == t).count();
    assert_eq!((count("hash"), count("string")), (8, 4), "{layouts:?}");
}
