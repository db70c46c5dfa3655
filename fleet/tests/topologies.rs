//! The cluster and Sentinel launchers start what they say they start.

use std::time::Duration;

use idemgate_fleet::{RedisCluster, SentinelSet};

#[test]
fn cluster_starts_with_three_primaries_and_survives_a_failover() {
    let mut cluster = RedisCluster::start();
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3, "three primaries");
    let owner = cluster.primary_for_slot(0);
    assert!(primaries.contains(&owner));
    assert!(cluster.slots_of(owner).iter().any(|&(a, _)| a == 0));
    let replica = cluster.replica_of(owner).expect("a replica");
    assert!(cluster.cli(0, &["SET", "{a}x", "1"]).contains("OK"));
    cluster.kill(owner);
    cluster.wait_primary(replica, Duration::from_secs(20));
    cluster.start_again(owner);
    cluster.wait_ok(Duration::from_secs(20));
    assert_eq!(cluster.primary_for_slot(0), replica);
}

#[test]
fn sentinels_agree_and_fail_over() {
    let mut set = SentinelSet::start();
    assert_eq!(set.primary(), 0);
    assert_eq!(set.failover(), 1);
    set.wait_agreed(Duration::from_secs(30));
    assert_eq!(set.kill_primary(), 0);
}
