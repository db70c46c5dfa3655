//! Every script runs in one hash slot; cold detection per
//! shard (one warmth marker per slot, tied to the server process that wrote it), on a real
//! cluster and a real Sentinel set with Postgres behind them.

use std::time::Duration;

use idemgate::config::RedisConfig;
use idemgate::idempotency::RecordId;
use idemgate::testing::store::redis::slots::slot;
use idemgate::testing::store::RedisStore;
use idemgate_fleet::{RedisCluster, SentinelSet};
use rand::Rng;

use super::{cluster_config, record_key, sentinel_config, until_replicated};
use crate::support::redis::backdate_markers;
use crate::support::{eventually, read, until_rows, MockUpstream, PgServer, RedisServer, TestApp};
use idemgate::testing::store::redis::{slots::Slotted, OnLapsed};

const TWO_DAYS: Duration = Duration::from_secs(48 * 3600);

#[tokio::test]
async fn every_script_is_given_keys_of_one_slot() {
    let redis = RedisServer::start();
    let config = RedisConfig {
        url: redis.url(),
        ..RedisConfig::default()
    };
    // Every marker: the epoch marker (any mode with `[postgres]`) and the warmth marker.
    let quarantine = Some(Duration::from_secs(2));
    let store = RedisStore::connect_with(&config, quarantine, None)
        .await
        .unwrap();
    let claim_keys = store.script_keys("idemgate:{00}").remove(0);
    assert_eq!(claim_keys.1.len(), 4, "{claim_keys:?}");
    let mut rng = rand::rng();
    for _ in 0..5000 {
        let bytes: [u8; 32] = rng.random();
        let record = RecordId::from_hex(&hex::encode(bytes)).unwrap();
        let key = store.record_key(record);
        let home = slot(&key);
        for (script, keys) in store.script_keys(&key) {
            for k in &keys {
                assert_eq!(slot(k), home, "{script}: {k} is not in the slot of {key}");
            }
        }
    }
}

/// The gateway with Postgres, `lookup_on_miss = "when_cold"`, and no fallback (so a
/// replay can only come from Redis or the Postgres lookup).
fn durable(pg: &PgServer) -> String {
    format!(
        "{}[idempotency]\non_redis_unavailable = \"reject\"\n",
        pg.section("lookup_on_miss = \"when_cold\"\nclaims = \"redis\"")
    )
}

/// Sends until the answer is not a 503 (Redis reconnecting); whether it was replayed.
async fn replayed(app: &TestApp, key: &str) -> bool {
    let mut answer = None;
    let back = eventually(Duration::from_secs(10), async || {
        let (status, headers, _) = read(app.post(key, "{}").send().await.unwrap()).await;
        answer = Some((status, headers));
        status != 503
    });
    assert!(back.await, "{key}: redis did not come back");
    let (status, headers) = answer.unwrap();
    assert_eq!(status, 201, "{key}");
    headers["idempotent-replayed"] == "true"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_restarted_empty_is_cold_on_its_own() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(cluster_config(
        cluster.seed_urls(),
        &upstream.url(),
        &durable(&pg),
    ))
    .await;
    // Our slot function is Redis' own.
    let probe = record_key("w-0");
    let keyslot = tokio::task::block_in_place(|| cluster.cli(0, &["CLUSTER", "KEYSLOT", &probe]));
    assert_eq!(keyslot.trim(), slot(&probe).to_string());
    // Every shard provably warm.
    for p in tokio::task::block_in_place(|| cluster.primaries()) {
        let ranges = tokio::task::block_in_place(|| cluster.slots_of(p));
        backdate_markers(&cluster.nodes()[p].url(), &ranges, TWO_DAYS).await;
    }
    app.until_policy_read().await;

    let keys: Vec<String> = (0..30).map(|i| format!("w-{i}")).collect();
    for k in &keys {
        assert!(!replayed(&app, k).await);
    }
    assert_eq!(upstream.executions(), 30);
    let shard_of = |k: &str| cluster.primary_for_slot(slot(&record_key(k)));
    let shards: Vec<usize> =
        tokio::task::block_in_place(|| keys.iter().map(|k| shard_of(k)).collect());
    let cold = shards[0];
    let warm_key = (keys.iter().zip(&shards))
        .find(|(_, s)| **s != cold)
        .unwrap()
        .0;
    let cold_keys: Vec<&String> = (keys.iter().zip(&shards))
        .filter(|(_, s)| **s == cold)
        .map(|(k, _)| k)
        .collect();
    until_rows(&pg, "state = 'completed'", 30).await;

    // One shard loses everything: SIGKILL and back at once, empty (no persistence).
    tokio::task::block_in_place(|| {
        cluster.restart_empty(cold);
        cluster.wait_ok(Duration::from_secs(20));
    });
    // A record lost from a warm shard only: the warm shard's marker still vouches, so
    // no lookup, and it runs again (what `when_cold` trades for speed).
    let lost = tokio::task::block_in_place(|| cluster.cli(0, &["DEL", &record_key(warm_key)]));
    assert_eq!(lost.trim(), "1");
    assert!(!replayed(&app, warm_key).await, "warm shard: no lookup");
    assert_eq!(upstream.executions(), 31);
    // Every key of the emptied shard is found in Postgres: that shard is cold.
    for k in &cold_keys {
        assert!(replayed(&app, k).await, "{k} was on the emptied shard");
    }
    assert_eq!(
        upstream.executions(),
        31,
        "nothing of the cold shard ran again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_with_a_replicated_marker_is_cold() {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(sentinel_config(&set, &upstream.url(), &durable(&pg))).await;
    let primary = set.primary();
    backdate_markers(&set.servers()[primary].url(), &[(0, 16383)], TWO_DAYS).await;
    app.until_policy_read().await;
    for k in ["p-0", "p-1", "p-2"] {
        assert!(!replayed(&app, k).await);
    }
    // Warm: a record lost from Redis alone runs again (no lookup).
    let del =
        tokio::task::block_in_place(|| set.servers()[primary].cli(&["DEL", &record_key("p-0")]));
    assert_eq!(del.trim(), "1");
    assert!(!replayed(&app, "p-0").await, "warm before the failover");
    assert_eq!(upstream.executions(), 4);
    until_rows(&pg, "state = 'completed'", 3).await;
    until_replicated(&set.servers()[primary], &set.servers()[1 - primary]).await;

    // The replica, with every marker replicated, becomes primary. The gateway sends
    // nothing meanwhile (a claim failing on the lost connection would trip its breaker,
    // which resets every marker anyway); a fresh one asks the sentinels after it.
    drop(app);
    let promoted = tokio::task::block_in_place(|| set.failover());
    assert_ne!(promoted, primary);
    let app = TestApp::spawn(sentinel_config(&set, &upstream.url(), &durable(&pg))).await;
    app.until_policy_read().await;
    // A write the old primary acknowledged but never replicated, lost in the failover.
    let del =
        tokio::task::block_in_place(|| set.servers()[promoted].cli(&["DEL", &record_key("p-1")]));
    assert_eq!(del.trim(), "1");
    assert!(
        replayed(&app, "p-1").await,
        "the replicated marker names another server: cold, so the lookup finds it"
    );
    assert_eq!(upstream.executions(), 4, "nothing ran again");
}

/// A breaker trip caused by one shard resets no marker of the others: with
/// `on_redis_unavailable = "reject"` nothing was written elsewhere during the outage,
/// so a warm shard still vouches (no lookup) once the breaker closes, while the keys of
/// the shard that went away are still found (in Redis or in Postgres), none run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_trip_leaves_the_other_shards_warm() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(cluster_config(
        cluster.seed_urls(),
        &upstream.url(),
        &durable(&pg),
    ))
    .await;
    for p in tokio::task::block_in_place(|| cluster.primaries()) {
        let ranges = tokio::task::block_in_place(|| cluster.slots_of(p));
        backdate_markers(&cluster.nodes()[p].url(), &ranges, TWO_DAYS).await;
    }
    app.until_policy_read().await;
    let keys: Vec<String> = (0..20).map(|i| format!("t-{i}")).collect();
    for k in &keys {
        assert!(!replayed(&app, k).await);
    }
    let shards: Vec<usize> = tokio::task::block_in_place(|| {
        (keys.iter())
            .map(|k| cluster.primary_for_slot(slot(&record_key(k))))
            .collect()
    });
    let down = shards[0];
    let warm_key = (keys.iter().zip(&shards))
        .find(|(_, s)| **s != down)
        .unwrap()
        .0
        .clone();
    until_rows(&pg, "state = 'completed'", 20).await;

    // The shard goes away; a claim on it fails and trips the breaker (503: reject).
    tokio::task::block_in_place(|| cluster.kill(down));
    let (status, _, _) = read(app.post(&keys[0], "{}").send().await.unwrap()).await;
    assert_eq!(status, 503, "the claim on the dead shard failed");
    let metrics = reqwest::get(format!("http://{}/metrics", app.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("idemgate_redis_up 0"),
        "the breaker tripped: {}",
        metrics
            .lines()
            .filter(|l| l.contains("redis_up"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    tokio::task::block_in_place(|| {
        cluster.start_again(down);
        cluster.wait_ok(Duration::from_secs(30));
    });
    // A record lost from a warm shard: its marker still vouches, so it runs again.
    let lost = tokio::task::block_in_place(|| cluster.cli(0, &["DEL", &record_key(&warm_key)]));
    assert_eq!(lost.trim(), "1");
    assert!(
        !replayed(&app, &warm_key).await,
        "the warm shard stayed warm"
    );
    assert_eq!(upstream.executions(), 21);
    for (k, s) in keys.iter().zip(&shards) {
        if *s == down {
            assert!(replayed(&app, k).await, "{k}");
        }
    }
    assert_eq!(
        upstream.executions(),
        21,
        "nothing of the shard that went away ran again"
    );
}

/// A restart that loads an RDB file (a crash, a restore) brings back markers that were
/// provably warm in the process that saved them, but not the writes made after the
/// snapshot: the markers came from a file, so they vouch for nothing, and the lost
/// record is found in Postgres. Fails if the claim script trusts a marker's age without
/// its proof of origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_restored_from_a_snapshot_are_cold() {
    let mut redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let url = redis.url();
    let config = || crate::support::config(&url, &upstream.url(), &durable(&pg));
    let app = TestApp::spawn(config()).await;
    backdate_markers(&url, &[(0, 16383)], TWO_DAYS).await;
    app.until_policy_read().await;
    assert!(!replayed(&app, "s-0").await);
    assert!(!replayed(&app, "s-1").await);
    // Warm: a record lost from Redis alone runs again (no lookup).
    let del = tokio::task::block_in_place(|| redis.cli(&["DEL", &record_key("s-0")]));
    assert_eq!(del.trim(), "1");
    assert!(!replayed(&app, "s-0").await, "warm before the restore");
    assert_eq!(upstream.executions(), 3);

    // A snapshot, then a key completed after it (written through to Postgres).
    let saved = tokio::task::block_in_place(|| redis.cli(&["SAVE"]));
    assert_eq!(saved.trim(), "OK");
    assert!(!replayed(&app, "s-2").await);
    assert_eq!(upstream.executions(), 4);
    until_rows(&pg, "state = 'completed'", 3).await;
    // SIGKILL, back from the snapshot: s-2 is gone from Redis, the markers are back.
    drop(app);
    tokio::task::block_in_place(|| redis.restart());
    let states = redis.record_states().await;
    assert!(
        !states.iter().any(|(k, _)| *k == record_key("s-2")),
        "the record written after the snapshot is lost: {states:?}"
    );
    let app = TestApp::spawn(config()).await;
    app.until_policy_read().await;
    assert!(
        replayed(&app, "s-2").await,
        "the restored markers vouch for nothing: cold, so the lookup finds it"
    );
    assert_eq!(upstream.executions(), 4, "nothing ran again");
}

/// The marker as the claim script itself writes it: it vouches in the process that
/// wrote it, and in no other: not on the replica it was replicated to once that
/// replica is promoted, not after a reload from a file. Here a marker vouches from
/// 1 ms (`set_vouch_after`), so every claim after the first checks the proof of origin.
/// Fails if the script's marking is replicated or persisted, or if the proof is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marker_vouches_only_in_the_process_that_wrote_it() {
    let primary = RedisServer::start();
    let port = primary.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    // Synced before the first claim: the marker reaches the replica as a command.
    let synced = eventually(Duration::from_secs(20), async || {
        tokio::task::block_in_place(|| replica.info("master_link_status")).as_deref() == Some("up")
    });
    assert!(synced.await, "the replica never synced");
    let store_on = |url: String| async move {
        let store = RedisStore::connect(&RedisConfig {
            url,
            ..RedisConfig::default()
        })
        .await
        .unwrap();
        store.set_vouch_after(Some(Duration::from_millis(1)));
        store
    };
    let store = store_on(primary.url()).await;
    // Records of one slot, so of one marker.
    let mut rng = rand::rng();
    let first =
        store.record_key(RecordId::from_hex(&hex::encode(rng.random::<[u8; 32]>())).unwrap());
    let same_slot: Vec<String> = std::iter::repeat_with(|| {
        store.record_key(RecordId::from_hex(&hex::encode(rng.random::<[u8; 32]>())).unwrap())
    })
    .filter(|k| slot(k) == slot(&first))
    .take(3)
    .collect();
    let fp = idemgate::idempotency::Fingerprint::new(
        &Default::default(),
        &http::Method::POST,
        &"/v1/x".parse().unwrap(),
        &http::HeaderMap::new(),
        b"",
    );
    let age = |store: RedisStore, key: String| async move {
        let leases = (Duration::from_secs(30), Duration::from_secs(30));
        let claim = store.claim(Slotted::new(&key), &fp, "t", leases, true, OnLapsed::Ask);
        match claim.await.unwrap() {
            idemgate::idempotency::Claim::Acquired(a) => a.marker_age,
            other => panic!("not acquired: {other:?}"),
        }
    };
    assert_eq!(
        age(store.clone(), first.clone()).await,
        Duration::ZERO,
        "new marker"
    );
    tokio::time::sleep(Duration::from_millis(50)).await; // the marker ages in real time
    assert!(
        age(store.clone(), same_slot[0].clone()).await >= Duration::from_millis(50),
        "the process that wrote the marker: it vouches"
    );

    // The replica holds the same marker, but not as its writer does.
    let markers = || tokio::task::block_in_place(|| replica.cli(&["KEYS", "idemgate:warm:*"]));
    let arrived = eventually(Duration::from_secs(10), async || {
        !markers().trim().is_empty()
    });
    assert!(arrived.await, "the marker never reached the replica");
    let marker = markers().trim().to_string();
    let encoding = |r: &RedisServer| r.cli(&["OBJECT", "ENCODING", &marker]).trim().to_string();
    assert_eq!(tokio::task::block_in_place(|| encoding(&primary)), "raw");
    assert_ne!(tokio::task::block_in_place(|| encoding(&replica)), "raw");
    // Promoted, the replica does not vouch with it: renewed, age 0.
    let promoted = tokio::task::block_in_place(|| replica.cli(&["REPLICAOF", "NO", "ONE"]));
    assert_eq!(promoted.trim(), "OK");
    let on_replica = store_on(replica.url()).await;
    assert_eq!(
        age(on_replica, same_slot[1].clone()).await,
        Duration::ZERO,
        "a replicated marker is renewed"
    );
    // The primary reloads its data from a file: renewed too.
    let reloaded = tokio::task::block_in_place(|| primary.cli(&["DEBUG", "RELOAD"]));
    assert_eq!(reloaded.trim(), "OK");
    assert_eq!(
        age(store, same_slot[2].clone()).await,
        Duration::ZERO,
        "a marker loaded from a file is renewed"
    );
}
