//! A cluster through `redis-cli`: joined (`--cluster create`), checked
//! (`CLUSTER INFO` on every node), and its slot map read (`CLUSTER NODES`), for
//! [`RedisCluster`](super::RedisCluster) and the other fleets that build one.

use std::net::SocketAddr;
use std::process::Command;

use super::*;

/// Joins the empty cluster nodes listening on `ports` (127.0.0.1) into one cluster with
/// `replicas` replicas per primary (`redis-cli --cluster create ... --cluster-yes`);
/// redis-cli's output on failure. Used by [`RedisCluster`] and by the detached nodes of
/// `make bench` (`crate::bench`), which start their own processes on fixed ports.
pub(crate) fn create_on(ports: &[u16], replicas: usize) -> Result<(), String> {
    let addrs: Vec<SocketAddr> = ports.iter().map(|&p| ([127, 0, 0, 1], p).into()).collect();
    create_at(&addrs, replicas)
}

/// [`create_on`] for nodes at `addrs`.
pub(super) fn create_at(addrs: &[SocketAddr], replicas: usize) -> Result<(), String> {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["--cluster", "create"]);
    cmd.args(addrs.iter().map(SocketAddr::to_string));
    cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
    let out = cmd
        .output()
        .map_err(|e| format!("redis-cli must be on PATH: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Whether every node on `ports` says `cluster_state:ok` with all 16,384 slots served
/// and sees every other one as connected, and every replica among them has its link to
/// its primary up (synced: `WAIT` counts it; nothing to wait for without replicas).
pub(crate) fn is_ok_on(ports: &[u16]) -> bool {
    let addrs: Vec<SocketAddr> = ports.iter().map(|&p| ([127, 0, 0, 1], p).into()).collect();
    is_ok_at(&addrs)
}

/// [`is_ok_on`] for nodes at `addrs`.
pub(super) fn is_ok_at(addrs: &[SocketAddr]) -> bool {
    let cli = |addr: &SocketAddr, args: &[&str]| {
        Command::new("redis-cli")
            .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    addrs.iter().all(|&p| {
        let info = cli(&p, &["CLUSTER", "INFO"]);
        let nodes = cli(&p, &["CLUSTER", "NODES"]);
        let synced = info_addr(p, "role").as_deref() != Some("slave")
            || info_addr(p, "master_link_status").as_deref() == Some("up");
        info.contains("cluster_state:ok")
            && info.contains("cluster_slots_ok:16384")
            && synced
            && addrs.iter().all(|m| {
                nodes.lines().any(|l| {
                    l.contains(&format!("{m}@")) && l.contains("connected") && !l.contains("fail")
                })
            })
    })
}

/// The port of the primary serving `slot` from a `CLUSTER NODES` listing.
pub(super) fn slot_owner_from_nodes(nodes: &str, slot: u16) -> Option<u16> {
    nodes.lines().find_map(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            return None;
        }
        let serves = parse_slot_ranges(l)
            .iter()
            .any(|&(a, b)| a <= slot && slot <= b);
        if !serves {
            return None;
        }
        // 127.0.0.1:port@bus
        let addr = fields[1].split('@').next()?;
        addr.rsplit(':').next()?.parse().ok()
    })
}

pub(super) fn parse_slot_ranges(line: &str) -> Vec<(u16, u16)> {
    line.split(' ')
        .skip(8)
        .filter(|f| !f.starts_with('['))
        .filter_map(|f| match f.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => f.parse().ok().map(|s| (s, s)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_on_joins_three_primaries_without_replicas() {
        let args = cluster_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&args)).collect();
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        assert!(!is_ok_on(&ports), "not a cluster before create");
        create_on(&ports, 0).expect("redis-cli --cluster create");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_ok_on(&ports) {
            assert!(Instant::now() < deadline, "cluster not ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        for n in &nodes {
            assert!(n.cli(&["ROLE"]).starts_with("master"));
        }
        assert!(create_on(&ports, 0).is_err(), "nodes already in a cluster");
    }

    #[test]
    fn parses_slot_owner() {
        let nodes = "a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460\n\
                     b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922 16000\n\
                     c 127.0.0.1:7003@17003 slave b 0 0 2 connected\n";
        assert_eq!(slot_owner_from_nodes(nodes, 0), Some(7001));
        assert_eq!(slot_owner_from_nodes(nodes, 5461), Some(7002));
        assert_eq!(slot_owner_from_nodes(nodes, 16000), Some(7002));
        assert_eq!(slot_owner_from_nodes(nodes, 16001), None);
    }
}
