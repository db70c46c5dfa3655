//! A real Redis Cluster on loopback: six `redis-server --cluster-enabled yes` on free
//! ports (three primaries, one replica each), joined with
//! `redis-cli --cluster create --cluster-replicas 1 --cluster-yes` and waited for until
//! every node's `CLUSTER INFO` says `cluster_state:ok`. A short `cluster-node-timeout`
//! (1000 ms) makes failovers quick. Nodes keep no data across a restart (no RDB, no
//! AOF) but keep their `nodes.conf`, so a restarted node rejoins the cluster empty.
//! Every node is killed on drop.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::net::Host;
use crate::redis::{info_addr, RedisServer};

mod cli;

use cli::{create_at, is_ok_at, parse_slot_ranges, slot_owner_from_nodes};
pub(crate) use cli::{create_on, is_ok_on};

/// How long a node may be unreachable before the cluster fails it over.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// Six nodes of one cluster; `nodes()[i]` keeps its index across restarts.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// The arguments that make a `redis-server` a cluster node (after
/// [`crate::redis::command`]); later arguments win.
pub(crate) fn cluster_args() -> Vec<String> {
    vec![
        "--cluster-enabled".into(),
        "yes".into(),
        "--cluster-config-file".into(),
        "nodes.conf".into(),
        "--cluster-node-timeout".into(),
        NODE_TIMEOUT_MS.to_string(),
        // A replica whose link to its primary was down for a while may still be promoted.
        "--cluster-replica-validity-factor".into(),
        "0".into(),
        // The other shards keep serving while one has no reachable primary (Redis'
        // default `yes` makes every node answer CLUSTERDOWN until the failover). A
        // primary in a minority partition still stops taking writes after the node
        // timeout: that check does not depend on this setting. idemgate warns at start
        // when it is `yes`.
        "--cluster-require-full-coverage".into(),
        "no".into(),
    ]
}

impl RedisCluster {
    /// Starts six nodes and joins them into three primaries with a replica each;
    /// returns once the whole cluster says ok and every slot is served.
    pub fn start() -> Self {
        Self::start_nodes(6, 1)
    }

    /// `count` nodes with `replicas` replicas per primary (`count` a multiple of
    /// `replicas + 1`, at least three primaries).
    pub fn start_nodes(count: usize, replicas: usize) -> Self {
        Self::start_on(&vec![Host::loopback(); count], replicas)
    }

    /// One node on each of `hosts` (namespaces of a [`crate::NetLab`]: each node
    /// announces its host's address, `cluster-announce-ip`), `replicas` per primary.
    pub fn start_on(hosts: &[Host], replicas: usize) -> Self {
        Self::start_on_with(hosts, replicas, &[])
    }

    /// [`Self::start_on`], every node with `extra` arguments too (e.g.
    /// [`crate::DURABLE_REDIS`]).
    pub fn start_on_with(hosts: &[Host], replicas: usize, extra: &[&str]) -> Self {
        for _ in 0..3 {
            let nodes: Vec<RedisServer> = (hosts.iter())
                .map(|h| {
                    let mut args = cluster_args();
                    args.extend(["--cluster-announce-ip".into(), h.ip.to_string()]);
                    args.extend(extra.iter().map(|a| a.to_string()));
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    RedisServer::start_on(h, &args)
                })
                .collect();
            let cluster = Self { nodes };
            // The cluster bus listens on port + 10000; a clash there fails `create`.
            if cluster.create(replicas) {
                cluster.wait_ok(Duration::from_secs(30));
                return cluster;
            }
        }
        panic!("could not create a Redis Cluster (see the nodes' redis.log)");
    }

    fn create(&self, replicas: usize) -> bool {
        create_at(&self.addrs(|_| true), replicas).is_ok()
    }

    fn addrs(&self, which: impl Fn(&RedisServer) -> bool) -> Vec<SocketAddr> {
        (self.nodes.iter())
            .filter(|n| which(n))
            .map(|n| n.host.addr(n.port))
            .collect()
    }

    /// Waits until every running node says `cluster_state:ok` and sees every other
    /// running node as connected, and every running replica's link to its primary is up
    /// (synced: `WAIT` counts it); panics after `within`.
    pub fn wait_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster not ok within {within:?}: {}",
                self.nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .map(|n| n.cli(&["CLUSTER", "INFO"]))
                    .next()
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn is_ok(&self) -> bool {
        is_ok_at(&self.addrs(RedisServer::is_running))
    }

    /// Whether the running nodes `among` agree as [`Self::wait_ok`] waits for (after a
    /// partition, the nodes of one side).
    pub fn is_ok_among(&self, among: &[usize]) -> bool {
        let addrs: Vec<SocketAddr> = (among.iter())
            .map(|&i| &self.nodes[i])
            .filter(|n| n.is_running())
            .map(|n| n.host.addr(n.port))
            .collect();
        is_ok_at(&addrs)
    }

    /// All six nodes, by index (running or not).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://ADDRESS:port` of every node, as seed URLs for a client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Indexes of the running nodes that are primaries now.
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].is_running() && self.nodes[i].cli(&["ROLE"]).starts_with("master")
            })
            .collect()
    }

    /// The index of the node that serves `slot` now, as a running node sees it.
    pub fn primary_for_slot(&self, slot: u16) -> usize {
        let asker = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("no node running");
        let port = slot_owner_from_nodes(&asker.cli(&["CLUSTER", "NODES"]), slot)
            .unwrap_or_else(|| panic!("no node serves slot {slot}"));
        self.index_of_port(port)
    }

    /// The index of the replica of the primary at `primary` (the first one).
    pub fn replica_of(&self, primary: usize) -> Option<usize> {
        let id = self.nodes[primary].cli(&["CLUSTER", "MYID"]);
        let id = id.trim();
        (0..self.nodes.len()).find(|&i| {
            i != primary
                && self.nodes[i].is_running()
                && self.nodes[i]
                    .cli(&["CLUSTER", "NODES"])
                    .lines()
                    .any(|l| l.contains("myself") && l.contains(id))
        })
    }

    /// The slots node `i` serves now (empty for a replica), as `(first, last)` ranges.
    pub fn slots_of(&self, i: usize) -> Vec<(u16, u16)> {
        let nodes = self.nodes[i].cli(&["CLUSTER", "NODES"]);
        let line = nodes.lines().find(|l| l.contains("myself")).unwrap_or("");
        parse_slot_ranges(line)
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }

    /// SIGSTOP node `i`: it stops answering with its connections open, as behind a
    /// partition (the cluster fails a primary over after [`NODE_TIMEOUT_MS`]).
    pub fn pause(&self, i: usize) {
        self.nodes[i].pause();
    }

    /// SIGCONT node `i` after [`Self::pause`].
    pub fn resume(&self, i: usize) {
        self.nodes[i].resume();
    }

    /// SIGKILL node `i` (its data is gone; `nodes.conf` stays).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].stop();
    }

    /// Starts node `i` again on its port, empty, with its cluster configuration.
    pub fn start_again(&mut self, i: usize) {
        self.nodes[i].start_again();
    }

    /// SIGKILL node `i` and start it again at once, empty. A primary back within
    /// [`NODE_TIMEOUT_MS`] stays primary (its replica resyncs from it and empties too):
    /// the shard lost its data without a failover.
    pub fn restart_empty(&mut self, i: usize) {
        self.nodes[i].restart();
    }

    /// Waits until the replica at `replica` reports itself a primary (after a failover).
    pub fn wait_primary(&self, replica: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.nodes[replica].cli(&["ROLE"]).starts_with("master") {
            assert!(
                Instant::now() < deadline,
                "node {replica} not promoted within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `CLUSTER FAILOVER` on the replica at `replica`: a manual, safe failover.
    pub fn failover(&self, replica: usize) -> String {
        self.nodes[replica].cli(&["CLUSTER", "FAILOVER"])
    }

    /// Moves `slots` hash slots from the primary at `from` to the primary at `to` with
    /// `redis-cli --cluster reshard` (keys move with `MIGRATE` while clients keep
    /// going; they follow `ASK` and `MOVED`). Blocks until done; redis-cli's output on
    /// failure.
    pub fn reshard(&self, from: usize, to: usize, slots: u32) -> Result<(), String> {
        let id = |i: usize| self.nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_string();
        // redis-cli refuses to reshard while the nodes still disagree about the slot
        // map (right after a previous reshard, until the gossip has spread it): wait
        // for agreement, up to 15 s, as an operator would re-run the check.
        let seed = self.nodes[from]
            .host
            .addr(self.nodes[from].port)
            .to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let check = Command::new("redis-cli")
                .args(["--cluster", "check", &seed])
                .output()
                .map_err(|e| format!("redis-cli must be on PATH: {e}"))?;
            let text = String::from_utf8_lossy(&check.stdout);
            if text.contains("All nodes agree") || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let out = Command::new("redis-cli")
            .args(["--cluster", "reshard"])
            .arg(&seed)
            .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .map_err(|e| format!("redis-cli must be on PATH: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Moves the one hash slot `slot` to the primary at `to`, the way
    /// `redis-cli --cluster reshard` moves each slot: `SETSLOT IMPORTING` on the
    /// target, `SETSLOT MIGRATING` on the owner, its keys moved with `MIGRATE`, then
    /// `SETSLOT NODE` on both and on every other primary. Blocks until done.
    pub fn move_slot(&self, slot: u16, to: usize) -> Result<(), String> {
        let from = self.primary_for_slot(slot);
        if from == to {
            return Ok(());
        }
        let id = |i: usize| self.nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_string();
        let (from_id, to_id, s) = (id(from), id(to), slot.to_string());
        let ok = |out: String| {
            if out.trim() == "OK" || out.trim() == "NOKEY" {
                Ok(())
            } else {
                Err(out)
            }
        };
        ok(self.nodes[to].cli(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]))?;
        ok(self.nodes[from].cli(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]))?;
        loop {
            let keys = self.nodes[from].cli(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let (ip, port) = (
                self.nodes[to].host.ip.to_string(),
                self.nodes[to].port.to_string(),
            );
            let mut args = vec!["MIGRATE", &ip, &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            ok(self.nodes[from].cli(&args))?;
        }
        for i in [to, from] {
            ok(self.nodes[i].cli(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]))?;
        }
        for i in self.primaries() {
            if i != to && i != from {
                ok(self.nodes[i].cli(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]))?;
            }
        }
        Ok(())
    }

    /// One command on node `i` through `redis-cli -c` (follows redirections).
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        self.nodes[i].cli_cluster(args)
    }
}
