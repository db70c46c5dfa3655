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
