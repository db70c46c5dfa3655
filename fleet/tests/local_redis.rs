//! The Redis tier of `make up REDIS=standalone|cluster|sentinel` (`local::redis_tier`),
//! started by the launcher on free ports in a temporary state directory: it serves (the
//! standalone pair as the default claims rely on, and with its data after a stop and a
//! start), a second start leaves it alone, a start after a node died brings it back,
//! another topology is refused while it runs, and the stop leaves no node running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemgate_fleet::local::{Local, RedisPorts, Topology};
use idemgate_fleet::{free_port, port_open};

/// Stops the tier even when an assertion fails (its nodes are detached).
struct Tier(Local);

impl Drop for Tier {
    fn drop(&mut self) {
        self.0.redis_down(Duration::from_secs(5));
    }
}

/// `n` distinct free ports whose cluster bus (port + 10000) is free too.
fn ports(n: usize) -> Vec<u16> {
    let mut found: Vec<u16> = Vec::new();
    while found.len() < n {
        let p = free_port();
        if p < 55000 && !port_open(p + 10000) && !found.contains(&p) {
            found.push(p);
        }
    }
    found
}

fn tier(root: &Path, topology: Topology) -> Tier {
    let p = ports(13);
    let mut local = Local::new(root, root, &root.join("idemgate.toml"), 1);
    local.ready_timeout = Duration::from_secs(60);
    local.redis = topology;
    local.redis_ports = RedisPorts {
        standalone: p[0],
        standalone_replica: p[12],
        cluster: [p[1], p[2], p[3], p[4], p[5], p[6]],
        sentinel_data: [p[7], p[8]],
        sentinels: [p[9], p[10], p[11]],
    };
    Tier(local)
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every pid file in the state directory, with the pid it names.
fn pids(state: &Path) -> Vec<(PathBuf, u32)> {
    let mut all: Vec<(PathBuf, u32)> = std::fs::read_dir(state)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pid"))
        .map(|p| {
            let pid = std::fs::read_to_string(&p).unwrap().trim().parse().unwrap();
            (p, pid)
        })
        .collect();
    all.sort();
    all
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, r)| !r.starts_with('Z'))
    })
}

/// A second start changes nothing; after `victim` (a node's port) is SIGKILLed, a start
/// brings it back (and waits until the tier serves again); another topology is refused
/// naming `make down`; the stop ends every process and removes every pid file.
fn restart_refuse_stop(tier: &mut Tier, other: Topology, expect: usize, victim: u16) {
    let before = pids(&tier.0.state);
    assert_eq!(before.len(), expect, "{before:?}");
    tier.0.redis_up().expect("second start");
    assert_eq!(pids(&tier.0.state), before, "a second start left it alone");

    let (file, pid) = (before.iter())
        .find(|(f, _)| f.to_string_lossy().ends_with(&format!("-{victim}.pid")))
        .cloned()
        .expect("the victim's pid file");
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    while port_open(victim) {
        std::thread::sleep(Duration::from_millis(20));
    }
    tier.0.redis_up().expect("a start after a node died");
    let after = pids(&tier.0.state);
    let restarted = after
        .iter()
        .find(|(f, _)| *f == file)
        .expect("pid file back")
        .1;
    assert_ne!(restarted, pid, "the dead node was started again");
    assert!(running(restarted) && port_open(victim));
    assert_eq!(after.len(), expect);

    let mine = tier.0.redis;
    tier.0.redis = other;
    let err = tier
        .0
        .redis_up()
        .expect_err("another topology while it runs");
    assert!(err.contains("make down"), "{err}");
    assert!(err.contains(&format!("REDIS={}", mine.as_str())), "{err}");
    tier.0.redis = mine;

    tier.0.redis_down(Duration::from_secs(5));
    for (file, pid) in before.iter().chain(&after) {
        assert!(!running(*pid), "{} still runs", file.display());
    }
    assert!(pids(&tier.0.state).is_empty(), "pid files removed");
}

#[test]
fn cluster_tier_has_three_primaries_and_stops_every_node() {
    let root = tempfile::tempdir().unwrap();
    let mut tier = tier(root.path(), Topology::Cluster);
    tier.0.redis_up().expect("cluster starts");
    let ports = tier.0.redis_ports.cluster;
    let nodes = cli(ports[0], &["CLUSTER", "NODES"]);
    assert_eq!(nodes.matches("master").count(), 3, "{nodes}");
    assert_eq!(nodes.matches("slave").count(), 3, "{nodes}");
    assert!(cli(ports[5], &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
    let env = Topology::Cluster.gateway_env(&tier.0.redis_ports);
    assert!(env.contains(&("IDEMGATE__REDIS__MODE", "cluster".into())));
    restart_refuse_stop(&mut tier, Topology::Sentinel, 6, ports[5]);
    assert!(ports.iter().all(|p| !port_open(*p)), "every node stopped");
}

#[test]
fn sentinel_tier_names_its_primary_and_stops_every_node() {
    let root = tempfile::tempdir().unwrap();
    let mut tier = tier(root.path(), Topology::Sentinel);
    tier.0.redis_up().expect("sentinel set starts");
    let (data, sentinels) = (
        tier.0.redis_ports.sentinel_data,
        tier.0.redis_ports.sentinels,
    );
    for s in sentinels {
        let addr = cli(s, &["SENTINEL", "get-master-addr-by-name", "idemgate"]);
        assert!(addr.contains(&data[0].to_string()), "{addr}");
    }
    assert!(cli(data[1], &["ROLE"]).starts_with("slave"));
    restart_refuse_stop(&mut tier, Topology::Cluster, 5, data[1]);
    let all = data.iter().chain(&sentinels);
    assert!(all.clone().all(|p| !port_open(*p)), "every node stopped");
}

#[test]
fn standalone_tier_runs_durable_with_a_replica_and_keeps_its_data() {
    let root = tempfile::tempdir().unwrap();
    let mut tier = tier(root.path(), Topology::Standalone);
    tier.0.redis_up().expect("standalone starts");
    let ports = &tier.0.redis_ports;
    let (primary, replica) = (ports.standalone, ports.standalone_replica);
    for port in [primary, replica] {
        for (name, want) in [
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("maxmemory-policy", "noeviction"),
        ] {
            let got = cli(port, &["CONFIG", "GET", name]);
            assert_eq!(got.lines().nth(1), Some(want), "{port} {name}: {got}");
        }
    }
    assert!(cli(replica, &["ROLE"]).starts_with("slave"));
    // Created empty: a deployment of its own, so that epoch markers a kept Postgres
    // recorded for an earlier Redis do not quarantine this one.
    let prefix = tier
        .0
        .key_prefix()
        .expect("an empty redis gets a new key prefix");
    assert!(prefix.starts_with("idemgate-standalone-"), "{prefix}");
    assert_eq!(cli(primary, &["SET", "kept", "v"]).trim(), "OK");
    let acked = cli(primary, &["WAIT", "1", "5000"]);
    assert_eq!(acked.trim(), "1", "the replica acknowledges a write");
    restart_refuse_stop(&mut tier, Topology::Cluster, 2, replica);
    tier.0.redis_up().expect("a start after the stop");
    assert_eq!(
        cli(primary, &["GET", "kept"]).trim(),
        "v",
        "loaded from its AOF"
    );
    assert_eq!(cli(replica, &["ROLE"]).lines().next(), Some("slave"));
    assert_eq!(tier.0.key_prefix(), Some(prefix), "the same deployment");
}
