//! A Redis Cluster primary that stops answering without closing its
//! connections (SIGSTOP: packets vanish, no RST, as behind a network partition). The
//! breaker belongs to that primary's shard: keys of the other shards keep going to
//! Redis; and claims on the shard are back within 2 s once it answers again when
//! resumed, within 3 s of its replica's promotion when failed over.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use idemgate::testing::store::redis::slots::slot;
use idemgate::Config;
use idemgate_fleet::RedisCluster;

use super::cluster_config;
use super::record_key;
use crate::support::process::BIN;
use crate::support::{eventually, read, MockUpstream, TestApp};

/// Redis only: a claim Redis cannot take answers 503.
const REDIS_ONLY: &str = "[idempotency]\non_redis_unavailable = \"reject\"\n";

/// The gateway on `cluster`, Redis only, with the short timeouts of the other tests
/// (300 ms commands: a paused primary trips its breaker before it is failed over).
fn gateway(cluster: &RedisCluster, upstream: &MockUpstream) -> Config {
    let mut c = cluster_config(cluster.seed_urls(), &upstream.url(), REDIS_ONLY);
    c.redis.command_timeout = Duration::from_millis(300);
    c.redis.connect_timeout = Duration::from_millis(500);
    c
}

/// For each primary now, `count` keys (`<prefix>-<n>`) whose records it serves.
fn keys_by_primary(
    cluster: &RedisCluster,
    prefix: &str,
    count: usize,
) -> HashMap<usize, Vec<String>> {
    let ranges: Vec<(usize, Vec<(u16, u16)>)> = (cluster.primaries().into_iter())
        .map(|p| (p, cluster.slots_of(p)))
        .collect();
    let mut keys: HashMap<usize, Vec<String>> = HashMap::new();
    for n in 0.. {
        let key = format!("{prefix}-{n}");
        let s = slot(&record_key(&key));
        let (p, _) = (ranges.iter())
            .find(|(_, r)| r.iter().any(|&(a, b)| a <= s && s <= b))
            .expect("every slot is served");
        let of = keys.entry(*p).or_default();
        if of.len() < count {
            of.push(key);
        }
        if keys.len() == ranges.len() && keys.values().all(|k| k.len() == count) {
            break;
        }
    }
    keys
}

/// Pauses `primary` and sends claims of `keys` (its keys) until a breaker opens (each
/// one 503); how many it sent. Panics after 10 s.
async fn pause_until_open(
    cluster: &RedisCluster,
    app: &TestApp,
    primary: usize,
    keys: &[String],
) -> usize {
    tokio::task::block_in_place(|| cluster.pause(primary));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sent = 0;
    while !app.breaker_open().await {
        assert!(Instant::now() < deadline, "the breaker did not open");
        let r = app.post(&keys[sent % keys.len()], "{}");
        let t = Instant::now();
        let r = r.timeout(Duration::from_secs(5)).send().await;
        if std::env::var("PARTITION_DEBUG").is_ok() {
            let status = r.as_ref().map(|r| r.status().as_u16()).ok();
            eprintln!("trip claim {sent}: {status:?} in {:?}", t.elapsed());
        }
        sent += 1;
    }
    sent
}

/// Keys of the healthy shards all go through, for 3 s, while one primary is paused.
/// Two fixes, each shown necessary (3 runs of 3 failed without it, 8-27 of ~170 keys
/// refused): the pool split into lanes (`store::redis::lanes`; before, fred's clients
/// that touched the paused primary reconnected as a whole and served no shard), and the
/// cluster's `cluster-require-full-coverage no` (the launcher's setting; with Redis'
/// default `yes` the healthy nodes answer CLUSTERDOWN once the paused one is marked
/// failed, until the failover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_opens_the_breaker_of_its_shard_only() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(gateway(&cluster, &upstream)).await;
    let keys = tokio::task::block_in_place(|| keys_by_primary(&cluster, "k", 200));
    let mut primaries: Vec<usize> = keys.keys().copied().collect();
    primaries.sort();
    let paused = primaries[0];
    // Every shard answers (and every connection is up) before the pause.
    for p in &primaries {
        let (status, _, _) = read(app.post(&keys[p][0], "{}").send().await.unwrap()).await;
        assert_eq!(status, 201);
    }
    let before = upstream.executions();

    // Claims of the paused shard's keys until its breaker opens.
    pause_until_open(&cluster, &app, paused, &keys[&paused][1..]).await;
    let opened = Instant::now();

    // Keys of the two healthy shards, alternately, one every 10 ms for 3 s while the
    // primary stays paused: long enough for fred to drop the hung connections (after
    // 2 x command_timeout) and for the breaker's probes to touch the paused primary.
    let (a, b) = {
        let mut healthy = primaries.iter().filter(|p| **p != paused);
        let (a, b) = (healthy.next().unwrap(), healthy.next().unwrap());
        (&keys[a][1..], &keys[b][1..])
    };
    let healthy: Vec<&String> = a.iter().zip(b).flat_map(|(a, b)| [a, b]).collect();
    let mut failed = Vec::new();
    let mut sent_keys = 0;
    for key in &healthy {
        if opened.elapsed() > Duration::from_secs(3) {
            break;
        }
        sent_keys += 1;
        let sent = Instant::now();
        let r = app.post(key, "{}").timeout(Duration::from_secs(5)).send();
        let (status, _, body) = read(r.await.unwrap()).await;
        if status != 201 {
            failed.push(format!(
                "{key}: {status} at {:?} after the breaker opened, in {:?}: {}",
                sent - opened,
                sent.elapsed(),
                String::from_utf8_lossy(&body)
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let healthy = &healthy[..sent_keys];
    let paused_for = opened.elapsed();
    tokio::task::block_in_place(|| cluster.resume(paused));
    assert!(
        failed.is_empty(),
        "{} of {} keys of healthy shards refused while another shard was paused ({paused_for:?}): {failed:#?}",
        failed.len(),
        healthy.len()
    );
    assert_eq!(
        upstream.executions() - before,
        healthy.len(),
        "each key of a healthy shard ran once"
    );
    for key in healthy {
        let (status, headers, _) = read(app.post(key, "{}").send().await.unwrap()).await;
        assert_eq!(
            (status, &headers["idempotent-replayed"]),
            (201, &"true".parse().unwrap()),
            "{key}"
        );
    }
    assert_eq!(
        upstream.executions() - before,
        healthy.len(),
        "replayed, not run again"
    );
}

/// Sends claims of new keys of `keys` until one is taken (201); how long that took.
async fn until_claims_back(app: &TestApp, keys: &[String]) -> Duration {
    let started = Instant::now();
    for key in keys {
        let r = app.post(key, "{}").timeout(Duration::from_secs(5)).send();
        if let Ok(r) = r.await {
            if read(r).await.0 == 201 {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "claims never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("claims never came back");
}

mod realtime;

/// A replica's replay cache must not keep answering with a response
/// its Redis tier no longer holds. A key is completed and cached; its shard fails over
/// (a manual `CLUSTER FAILOVER`) and the promoted primary holds another completed record
/// for it (what a failover after a partition leaves: the majority ran the key again).
/// Once the gateway has seen the failover, the key replays what the tier holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_drops_the_replay_cache() {
    a_failover_drops_the_replay_cache(false).await;
}

/// The same through a partition: the shard's primary is paused until its breaker opens
/// and the cluster promotes its replica, which then holds the other response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_failover_drops_the_replay_cache() {
    a_failover_drops_the_replay_cache(true).await;
}

async fn a_failover_drops_the_replay_cache(partition: bool) {
    use fred::prelude::{Builder, ClientLike, Config as FredConfig, KeysInterface};

    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let mut config = gateway(&cluster, &upstream);
    config.replay_cache.max_bytes = bytesize::ByteSize::mib(1);
    config.replay_cache.max_age = Duration::from_secs(600);
    let app = TestApp::spawn(config).await;
    let keys = tokio::task::block_in_place(|| keys_by_primary(&cluster, "c", 200));
    let shard = *keys.keys().min().unwrap();
    let other = *keys.keys().max().unwrap();
    let (cached, replacement) = (&keys[&shard][0], &keys[&other][0]);
    // Two completed records with the same fingerprint, different responses.
    let (_, _, first) = read(app.post(cached, "{}").send().await.unwrap()).await;
    let (_, _, second) = read(app.post(replacement, "{}").send().await.unwrap()).await;
    assert_ne!(first, second);
    let (_, headers, replayed) = read(app.post(cached, "{}").send().await.unwrap()).await;
    assert_eq!(
        (&headers["idempotent-replayed"], &replayed),
        (&"true".parse().unwrap(), &first)
    );

    let replica = tokio::task::block_in_place(|| cluster.replica_of(shard)).unwrap();
    let client =
        Builder::from_config(FredConfig::from_url(&cluster.nodes()[replica].url()).unwrap())
            .build()
            .unwrap();
    client.init().await.unwrap();
    let source = Builder::from_config(FredConfig::from_url(&cluster.nodes()[other].url()).unwrap())
        .build()
        .unwrap();
    source.init().await.unwrap();
    let dump: bytes::Bytes = source.dump(record_key(replacement)).await.unwrap();
    // The shard fails over; the promoted primary holds the other response for the key.
    if partition {
        pause_until_open(&cluster, &app, shard, &keys[&shard][2..]).await;
    } else {
        tokio::task::block_in_place(|| cluster.failover(replica));
    }
    tokio::task::block_in_place(|| cluster.wait_primary(replica, Duration::from_secs(20)));
    let _: () = client
        .restore(
            record_key(cached),
            0,
            fred::types::Value::Bytes(dump),
            true,
            false,
            None,
            None,
        )
        .await
        .unwrap();
    if partition {
        tokio::task::block_in_place(|| cluster.resume(shard));
        until_claims_back(&app, &keys[&shard][1..]).await;
    } else {
        // Claims on the shard: the old primary answers MOVED, fred re-reads the slot map.
        // The first may time out (503): the old primary holds writes while the manual
        // failover completes (about 1 run in 7 in CI, before and after the lanes).
        until_claims_back(&app, &keys[&shard][1..]).await;
    }
    let fresh = async || read(app.post(cached, "{}").send().await.unwrap()).await.2 == second;
    assert!(
        eventually(Duration::from_secs(3), fresh).await,
        "still replaying the cached response, not the one the tier holds"
    );
    assert_eq!(upstream.executions(), 3, "nothing ran again");
}

/// The start-up warning about `cluster-require-full-coverage yes`, Redis' default: with
/// it, one unreachable primary makes every node refuse every key until the failover
/// (the test above then fails: healthy shards answer CLUSTERDOWN). Given when the
/// cluster requires full coverage, not when it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_requiring_full_coverage_is_warned_about_at_start() {
    use idemgate_fleet::{free_port, Replica};
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut warned = Vec::new();
    for (index, coverage) in ["yes", "no"].into_iter().enumerate() {
        for node in cluster.nodes() {
            node.cli(&["CONFIG", "SET", "cluster-require-full-coverage", coverage]);
        }
        let (port, admin) = (free_port(), free_port());
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             [log]\nformat = \"text\"\nfilter = \"info\"\n\
             [redis]\nmode = \"cluster\"\nnodes = {:?}\n\
             [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\n\
             upstream = \"http://127.0.0.1:9\"\n",
            cluster.seed_urls()
        );
        let config = dir.path().join(format!("gw{index}.toml"));
        std::fs::write(&config, toml).unwrap();
        let log = dir.path().join(format!("gw{index}.log"));
        let bin = std::path::Path::new(BIN);
        let mut replica = Replica::new(bin, index, port, admin, config, log);
        replica.start();
        crate::support::wait_ready(&http, &mut replica, Duration::from_secs(20)).await;
        warned.push(
            replica
                .log_text()
                .contains("cluster-require-full-coverage is yes"),
        );
    }
    assert_eq!(warned, [true, false], "warned with yes, then with no");
}
