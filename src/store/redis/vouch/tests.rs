//! Tests of [`Vouch`](super::Vouch): settings parsed, readings recorded and forgotten.

use super::*;

/// A reading: fsyncs, with or without a replica, outside cluster mode.
fn read(fsyncs: bool, replicas: u32) -> Option<Settings> {
    Some(Settings {
        fsyncs,
        replicas,
        publishes: true,
    })
}

fn pairs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn only_aof_always_fsyncs() {
    let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=...\r\n";
    // AOF `always` with `policy` for maxmemory.
    let aof_always = |policy| {
        let settings = [
            "appendonly",
            "yes",
            "appendfsync",
            "always",
            "maxmemory-policy",
            policy,
        ];
        parse_settings(&pairs(&settings), info)
    };
    let s = aof_always("noeviction");
    assert!(
        !aof_always("allkeys-lru").fsyncs,
        "a Redis that may evict a lease vouches for nothing"
    );
    assert_eq!(
        s,
        Settings {
            fsyncs: true,
            replicas: 1,
            publishes: false,
        },
        "a primary that does not say cluster-enabled no is probed with a write"
    );
    let outside_cluster = parse_settings(&pairs(&["cluster-enabled", "no"]), "");
    assert!(outside_cluster.publishes && !outside_cluster.fsyncs);
    assert!(!parse_settings(&pairs(&["cluster-enabled", "yes"]), "").publishes);
    let s = parse_settings(
        &pairs(&["appendfsync", "everysec", "appendonly", "yes"]),
        "",
    );
    assert!(!s.fsyncs);
    assert_eq!(s.replicas, 0);
    assert!(!parse_settings(&pairs(&["appendonly", "no", "appendfsync", "always"]), "").fsyncs);
    assert!(!parse_settings(&[], "").fsyncs);
}

#[test]
fn a_forgotten_shard_vouches_for_nothing() {
    let v = Vouch::new(Duration::from_secs(9), false);
    assert_eq!(v.of(7), Keeping::No);
    let all = super::super::cold_slots::all_slots();
    let g = v.generation();
    assert!(v.observe(g, &all, read(true, 0)));
    assert_eq!(v.of(16_383), Keeping::Fsync);
    assert!(v.observe(g, &all, read(true, 1)));
    assert_eq!(v.of(7), Keeping::FsyncAndReplica);
    assert!(!v.observe(g, &all, read(true, 1)));
    // A replica missing at one reading is still waited for.
    assert!(!v.observe(g, &all, read(true, 0)));
    assert_eq!(v.of(7), Keeping::FsyncAndReplica);
    assert!(v.publishes(7));
    assert!(v.observe(g, &all, None));
    assert_eq!(
        v.of(7),
        Keeping::No,
        "an unreadable primary vouches for nothing"
    );
    assert!(!v.publishes(7), "nor is it probed with PUBLISH");
    assert!(v.observe(g, &all, read(true, 0)));
    v.forget();
    assert_eq!(v.of(7), Keeping::No);
    assert!(!v.publishes(7));
    // A reading started before the forgetting is not recorded.
    assert!(!v.observe(g, &all, read(true, 0)));
    assert_eq!(v.of(7), Keeping::No);
}

#[test]
fn sentinel_and_cluster_primaries_always_wait_for_a_replica() {
    let v = Vouch::new(Duration::from_secs(9), true);
    let all = super::super::cold_slots::all_slots();
    assert!(v.observe(v.generation(), &all, read(true, 0)));
    assert_eq!(v.of(7), Keeping::FsyncAndReplica);
    v.forget();
    assert!(v.observe(v.generation(), &all, read(true, 0)));
    assert_eq!(v.of(7), Keeping::FsyncAndReplica);
}

/// A reading that races a `forget` never outlives it: whichever way their steps
/// interleave, once both are done the forgotten server vouches for nothing.
#[test]
fn a_reading_racing_a_forget_does_not_outlive_it() {
    let all = super::super::cold_slots::all_slots();
    for _ in 0..2_000 {
        let v = Vouch::new(Duration::from_secs(9), false);
        let g = v.generation();
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                v.observe(g, &all, read(true, 0));
            });
            s.spawn(|| {
                start.wait();
                v.forget();
            });
        });
        assert!(
            v.fsyncs.is_empty(),
            "a stale reading vouches for the forgotten server"
        );
        assert!(
            v.publishes.is_empty(),
            "a stale reading probes it with PUBLISH"
        );
    }
}
