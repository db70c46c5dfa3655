//! Claims while their slot migrates between primaries (resharding): Redis answers
//! `-TRYAGAIN` while a script's keys are split between the two nodes; the claim is
//! sent again once they moved, instead of failing the request with a 503; a claim
//! redirected until fred gives up on it is sent again the same way.

use std::time::Duration;

use idemgate::testing::store::redis::slots::slot;
use idemgate_fleet::RedisCluster;

use super::cluster_config;
use super::record_key;
use crate::support::{read, MockUpstream, TestApp};

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

/// A new key claimed while its slot is `MIGRATING`: the owner answers `ASK` (none of the
/// claim's keys are there yet) and fred, which re-sends an asked command by its slot map
/// rather than to the node named in the `ASK`, meets the same `ASK` again, redirection
/// after redirection, until its redirections (or, with fred's default of three write
/// attempts, its attempts) run out. The claim ran nowhere, so it is sent again after a
/// pause; once the slot has moved (a `MOVED`, then the new owner) it is served, once.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_redirected_until_its_slot_has_moved_is_served_once() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start_nodes(3, 0))
        .await
        .unwrap();
    let upstream = MockUpstream::start().await;
    let app = TestApp::spawn(cluster_config(cluster.seed_urls(), &upstream.url(), "")).await;
    assert_eq!(app.post("warm", "{}").send().await.unwrap().status(), 201);

    let key = "asked-again";
    let s = slot(&record_key(key));
    let from = cluster.primary_for_slot(s);
    let to = (cluster.primaries().into_iter())
        .find(|&p| p != from)
        .unwrap();
    let nodes = cluster.nodes();
    let id = |i: usize| nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_string();
    let ok = |out: String| assert_eq!(out.trim(), "OK");
    let n = s.to_string();
    ok(nodes[to].cli(&["CLUSTER", "SETSLOT", &n, "IMPORTING", &id(from)]));
    ok(nodes[from].cli(&["CLUSTER", "SETSLOT", &n, "MIGRATING", &id(to)]));

    let claim = tokio::spawn(app.post(key, "{}").send());
    tokio::time::sleep(Duration::from_millis(150)).await;
    tokio::task::block_in_place(|| {
        for i in cluster.primaries() {
            ok(nodes[i].cli(&["CLUSTER", "SETSLOT", &n, "NODE", &id(to)]));
        }
        cluster.wait_ok(Duration::from_secs(10));
    });
    let (status, _, body) = read(claim.await.unwrap().unwrap()).await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let response = app.post(key, "{}").send().await.unwrap();
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    assert_eq!(
        upstream.executions(),
        2,
        "warm and the asked key, once each"
    );
}
