//! Claims while their slot migrates between primaries (resharding): Redis answers
//! `-TRYAGAIN` while a script's keys are split between the two nodes; the claim is
//! sent again once they moved, instead of failing the request with a 503.

use std::time::Duration;

use idemgate::testing::store::redis::slots::slot;
use idemgate_fleet::RedisCluster;

use crate::shard_warmth::record_key;
use crate::support::{read, MockUpstream, TestApp};
use crate::topologies::cluster_config;

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_meeting_its_slot_half_migrated_is_retried() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(cluster_config(cluster.seed_urls(), &upstream.url(), "")).await;
    let (status, _, body) = read(app.post("migrating", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);

    // Start moving the record's slot the way `redis-cli --cluster reshard` does, and
    // stop half way: the record is on the new owner, its fence key and marker are not.
    let key = record_key("migrating");
    let s = slot(&key).to_string();
    let from = cluster.primary_for_slot(slot(&key));
    let to = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != from)
        .unwrap();
    let nodes = cluster.nodes();
    let id = |i: usize| nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_string();
    let ok = |out: String| assert!(matches!(out.trim(), "OK" | "NOKEY"), "{out}");
    ok(nodes[to].cli(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &id(from)]));
    ok(nodes[from].cli(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &id(to)]));
    let port = nodes[to].port.to_string();
    ok(nodes[from].cli(&["MIGRATE", "127.0.0.1", &port, &key, "0", "5000"]));

    // A retry of the key now meets split keys; the rest of the slot moves 60 ms later.
    let retry = tokio::spawn(app.post("migrating", "{}").send());
    tokio::time::sleep(Duration::from_millis(60)).await;
    tokio::task::block_in_place(|| {
        cluster.move_slot(slot(&key), to).unwrap();
        cluster.wait_ok(Duration::from_secs(10));
    });
    let (status, headers, again) = read(retry.await.unwrap().unwrap()).await;
    assert_eq!(status, 201, "answered {status} while the slot moved");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, body);
    assert_eq!(upstream.executions(), 1);
}

/// Claims while their slots keep moving between the three primaries: every claim
/// meets `MOVED` and `ASK` redirections, several in a row when slots move under it.
/// fred spends a write attempt on each redirection it follows, so a budget of three
/// attempts refused some claims (503) before their five redirections ran out; each key
/// must be served, and executed once.
#[tokio::test(flavor = "multi_thread")]
async fn claims_follow_redirections_while_their_slots_keep_moving() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(cluster_config(cluster.seed_urls(), &upstream.url(), "")).await;

    // Keys whose records fall in a few slots, and those slots moving round the primaries.
    let slots: Vec<u16> = (0..6)
        .map(|i| slot(&record_key(&format!("seed-{i}"))))
        .collect();
    let keys: Vec<String> = (0..)
        .map(|i| format!("moving-{i}"))
        .filter(|k| slots.contains(&slot(&record_key(k))))
        .take(36)
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = std::thread::spawn({
        let (stop, slots) = (stop.clone(), slots.clone());
        move || {
            let primaries = cluster.primaries();
            let mut moves = 0;
            for turn in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                for &s in &slots {
                    let to = primaries[(turn + s as usize) % primaries.len()];
                    cluster.move_slot(s, to).unwrap();
                    moves += 1;
                }
            }
            (cluster, moves)
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut refused = Vec::new();
    for wave in keys.chunks(6) {
        let sent = wave.iter().map(|k| app.post(k, "{}").send());
        for (key, response) in wave.iter().zip(futures_util::future::join_all(sent).await) {
            let (status, _, body) = read(response.unwrap()).await;
            if status != 201 {
                refused.push(format!(
                    "{key}: {status} {}",
                    String::from_utf8_lossy(&body)
                ));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (cluster, moves) = tokio::task::block_in_place(|| mover.join().unwrap());
    assert!(moves >= slots.len(), "the slots moved {moves} times");
    assert!(
        refused.is_empty(),
        "refused while slots moved: {refused:#?}"
    );
    tokio::task::block_in_place(|| cluster.wait_ok(Duration::from_secs(10)));
    for key in &keys {
        let response = app.post(key, "{}").send().await.unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(upstream.executions(), keys.len(), "every key ran once");
}
