//! The bench's Redis Cluster: three primaries without replicas (`redis-shard-1..3`) on
//! the fixed ports [`ports::REDIS_CLUSTER`] (cluster bus on port + 10000), each a
//! detached part with its pid file like every other bench part, joined with
//! `redis-cli --cluster create --cluster-replicas 0` ([`crate::redis_cluster`]) and
//! waited for until every node says `cluster_state:ok`. No replicas: the bench measures
//! what one primary's core does per request, and a replica would only add replication
//! traffic on the same two cores. Nodes start empty with a fresh `nodes.conf` under
//! `.state/bench/redis-cluster/PORT/`. The per-slot warmth markers are not backdated
//! here: the cluster rows run Redis only or write-through claims (no replica, no AOF:
//! vouched claims would all be written through anyway), which read no marker.

use std::time::{Duration, Instant};

use super::{ports, Bench, Res};
use crate::redis::{answers_ping, command as redis_command};
use crate::redis_cluster::{cluster_args, create_on, is_ok_on};

/// The part name of shard `i` (1-based); `redis-cluster` names them all.
pub fn shard_name(i: usize) -> String {
    format!("redis-shard-{i}")
}

/// Whether part `name` is a node of the bench's cluster.
pub fn is_shard(name: &str) -> bool {
    name.starts_with("redis-shard-")
}

impl Bench {
    /// Three empty cluster nodes on [`ports::REDIS_CLUSTER`], joined into one cluster of
    /// three primaries; refused (nothing touched) while any node runs; every node stopped
    /// again if a later step fails.
    pub fn start_redis_cluster(&self) -> Res {
        if let Some((name, pid)) = self.running().into_iter().find(|(n, _)| is_shard(n)) {
            return Err(format!(
                "{name} is already running (pid {pid}); stop redis-cluster first"
            ));
        }
        let all = ["redis-cluster".to_string()];
        self.start_cluster_nodes()
            .and_then(|()| self.join_cluster())
            .inspect_err(|_| self.stop(&all))
    }

    fn start_cluster_nodes(&self) -> Res {
        let base = self.state.join("redis-cluster");
        if base.exists() {
            std::fs::remove_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
        }
        for (i, &port) in ports::REDIS_CLUSTER.iter().enumerate() {
            let dir = base.join(port.to_string());
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let mut cmd = redis_command(port, &dir);
            cmd.args(cluster_args());
            // No failovers to wait for (no replicas): a longer node timeout keeps a node
            // that two saturated cores starve for a moment from being marked failed.
            cmd.args(["--cluster-node-timeout", "5000"]);
            cmd.args(["--maxmemory-policy", "noeviction", "--daemonize", "no"]);
            self.start(&shard_name(i + 1), &[port, port + 10_000], &mut cmd, || {
                answers_ping(port)
            })?;
        }
        Ok(())
    }

    fn join_cluster(&self) -> Res {
        let nodes = ports::REDIS_CLUSTER;
        create_on(&nodes, 0).map_err(|e| format!("redis-cli --cluster create failed: {e}"))?;
        let deadline = Instant::now() + self.ready_timeout;
        while !is_ok_on(&nodes) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis cluster not ok after {:?} (logs: {})",
                    self.ready_timeout,
                    self.log("redis-shard-1").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("==> redis cluster ok: 3 primaries on {nodes:?}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_recognised() {
        assert_eq!(shard_name(2), "redis-shard-2");
        assert!(is_shard(&shard_name(3)));
        assert!(!is_shard("redis") && !is_shard("gw-1"));
    }
}
