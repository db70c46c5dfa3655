//! The Redis tier of the local fleet (`make up REDIS=standalone|cluster|sentinel`), on
//! fixed loopback ports ([`RedisPorts::FIXED`]), with the gateway settings that point
//! the replicas at it ([`Topology::gateway_env`]):
//!
//! - `standalone`: a `redis-server` (pid file `redis.pid`, files in `.state/redis/`) and
//!   its replica on [`RedisPorts::standalone_replica`] (`redis-<port>.pid`, files in
//!   `.state/redis-replica/`), so that a claim can be acknowledged by a replica (`WAIT`);
//! - `cluster`: six nodes joined by `redis-cli --cluster create --cluster-replicas 1`
//!   (three primaries, a replica each; [`crate::redis_cluster`]'s node arguments and
//!   readiness check), `redis-<port>.pid`, node files (`nodes.conf`) in
//!   `.state/redis-cluster/<port>/`; the cluster bus takes port + 10000;
//! - `sentinel`: a primary and a replica (`redis-<port>.pid`) and three sentinels
//!   (`sentinel-<port>.pid`, [`crate::sentinel`]'s configuration, quorum 2), files in
//!   `.state/redis-sentinel/<port>/`.
//!
//! Every data node runs as the default claims (`postgres.claims = "vouched"`) rely on it,
//! [`DURABLE_REDIS`]: the AOF fsync'd before every reply, `maxmemory-policy noeviction`;
//! with a replica in every topology. The standalone pair keeps its files across `make
//! down`, so a restart loads its AOF, as Postgres keeps its data.
//! Node timeouts are longer than the tests' (5 s, not 1 s) so that a busy machine does
//! not fail a primary over during a load test. The mode the tier was started in is kept
//! in `.state/redis.mode`; starting another mode while anything of the fleet runs is
//! refused (stop it with `make down` first). Starting the mode that runs is safe: live
//! nodes are left alone, dead ones are started again (a cluster node rejoins with its
//! `nodes.conf` and its AOF; a sentinel-set server as a replica of the current primary);
//! when no node of a cluster or sentinel tier runs, its old files are removed and it is
//! created afresh. A tier created empty gets a key prefix of its own
//! ([`Local::key_prefix`]), so that the epoch markers the kept Postgres recorded for an
//! earlier Redis do not make it read as a Redis that lost its data.

use std::path::PathBuf;
use std::process::Command;

use super::daemon::{alive, pid_alive, read_pid, stop_all};
use super::{Local, Res};
use crate::redis::{answers_ping, cli_at, command as redis_command, info_addr, DURABLE_REDIS};
use crate::redis_cluster::{cluster_args, create_on, is_ok_on};
use crate::sentinel::{agreed_on, conf_text, primary_port_at, SERVICE_NAME};

/// The cluster's node timeout and the sentinels' `down-after-milliseconds` here.
pub const NODE_TIMEOUT_MS: u64 = 5000;

/// `REDIS`: which Redis the local fleet runs on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Topology {
    #[default]
    Standalone,
    Cluster,
    Sentinel,
}

impl Topology {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "standalone" => Ok(Self::Standalone),
            "cluster" => Ok(Self::Cluster),
            "sentinel" => Ok(Self::Sentinel),
            other => Err(format!(
                "REDIS must be standalone, cluster or sentinel (got '{other}')"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standalone => "standalone",
            Self::Cluster => "cluster",
            Self::Sentinel => "sentinel",
        }
    }

    /// The `IDEMGATE__REDIS__*` settings that point a replica at this tier (over the
    /// `[redis]` of its configuration file).
    pub fn gateway_env(self, ports: &RedisPorts) -> Vec<(&'static str, String)> {
        let urls = |ports: &[u16]| {
            let urls: Vec<String> = (ports.iter())
                .map(|p| format!("\"redis://127.0.0.1:{p}\""))
                .collect();
            format!("[{}]", urls.join(","))
        };
        match self {
            Self::Standalone => vec![],
            Self::Cluster => vec![
                ("IDEMGATE__REDIS__MODE", "cluster".into()),
                ("IDEMGATE__REDIS__NODES", urls(&ports.cluster)),
            ],
            Self::Sentinel => vec![
                ("IDEMGATE__REDIS__MODE", "sentinel".into()),
                (
                    "IDEMGATE__REDIS__SENTINEL__SERVICE_NAME",
                    SERVICE_NAME.into(),
                ),
                ("IDEMGATE__REDIS__SENTINEL__NODES", urls(&ports.sentinels)),
            ],
        }
    }
}

/// Whether the primary on `primary` counts a replica and the one on `replica` has its
/// link to it up (it answers `PING` once it loaded the primary's data).
fn linked(primary: u16, replica: u16) -> bool {
    let at = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    info_addr(at(primary), "connected_slaves").is_some_and(|n| n != "0")
        && answers_ping(replica)
        && info_addr(at(replica), "master_link_status").as_deref() == Some("up")
}

/// The ports of each topology's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisPorts {
    pub standalone: u16,
    /// The standalone primary's replica.
    pub standalone_replica: u16,
    /// Six cluster nodes (bus on port + 10000).
    pub cluster: [u16; 6],
    /// The sentinel set's data servers; the first starts as primary.
    pub sentinel_data: [u16; 2],
    pub sentinels: [u16; 3],
}

impl RedisPorts {
    /// `make up`'s ports.
    pub const FIXED: Self = Self {
        standalone: super::REDIS_PORT,
        standalone_replica: 6393,
        cluster: [7001, 7002, 7003, 7004, 7005, 7006],
        sentinel_data: [6391, 6392],
        sentinels: [26381, 26382, 26383],
    };
}

impl Local {
    fn mode_file(&self) -> PathBuf {
        self.file("redis.mode")
    }

    /// `redis.key_prefix` of the Redis the tier runs now (`.state/redis.prefix`), if
    /// it was created empty by this launcher.
    pub fn key_prefix(&self) -> Option<String> {
        let prefix = std::fs::read_to_string(self.file("redis.prefix")).ok()?;
        Some(prefix.trim().to_string()).filter(|p| !p.is_empty())
    }

    /// A new deployment's key prefix for a Redis created empty: under the old one, the
    /// epoch markers the local Postgres recorded (it keeps its data) would make the new
    /// Redis read as one that lost its data, and every new key would answer "in flight"
    /// for the quarantine (docs/guarantees.md, "Claims Redis vouches for").
    fn new_deployment(&self) -> Res {
        let secs = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
            .map_or(0, |d| d.as_secs());
        let prefix = format!("idemgate-{}-{secs}", self.redis.as_str());
        std::fs::write(self.file("redis.prefix"), format!("{prefix}\n")).map_err(|e| e.to_string())
    }

    /// Whether any process named by a pid file in the state directory is alive.
    fn anything_alive(&self) -> bool {
        let entries = std::fs::read_dir(&self.state)
            .into_iter()
            .flatten()
            .flatten();
        entries
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pid"))
            .any(|p| read_pid(&p).is_some_and(pid_alive))
    }

    /// Starts the Redis tier of [`Local::redis`] (what is not running yet) and waits
    /// until it serves; refuses another topology than the one running.
    pub fn redis_up(&self) -> Res {
        let want = self.redis;
        let running = std::fs::read_to_string(self.mode_file()).ok();
        let running = running.as_deref().map(str::trim);
        if running.is_some_and(|m| m != want.as_str()) && self.anything_alive() {
            return Err(format!(
                "the local fleet runs on REDIS={}; stop it with `make down` first, then \
                 `make up REDIS={}`",
                running.unwrap_or_default(),
                want.as_str()
            ));
        }
        std::fs::create_dir_all(&self.state).map_err(|e| e.to_string())?;
        std::fs::write(self.mode_file(), format!("{}\n", want.as_str()))
            .map_err(|e| e.to_string())?;
        match want {
            Topology::Standalone => self.standalone_up(),
            Topology::Cluster => self.cluster_up(),
            Topology::Sentinel => self.sentinel_up(),
        }
    }

    fn data_node(&self, port: u16, dir: &std::path::Path) -> Result<Command, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let mut cmd = redis_command(port, dir);
        cmd.args(DURABLE_REDIS).args(["--daemonize", "no"]);
        Ok(cmd)
    }

    /// The primary, then its replica, waited for until the replica's link is up.
    fn standalone_up(&self) -> Res {
        let (port, replica) = (
            self.redis_ports.standalone,
            self.redis_ports.standalone_replica,
        );
        let dir = self.state.join("redis");
        // No AOF yet: an empty Redis (the first start, or its files removed).
        if !dir.join("appendonlydir").exists() && !answers_ping(port) {
            self.new_deployment()?;
        }
        let mut redis = self.data_node(port, &dir)?;
        self.start("redis-server", "redis", &[port], &mut redis)?;
        self.wait_ready("redis-server", Some("redis"), || answers_ping(port))?;
        let file = format!("redis-{replica}");
        let mut cmd = self.data_node(replica, &self.state.join("redis-replica"))?;
        cmd.args(["--replicaof", "127.0.0.1", &port.to_string()]);
        self.start("redis-server", &file, &[replica], &mut cmd)?;
        self.wait_ready(&format!("redis replica {replica}"), Some(&file), || {
            linked(port, replica)
        })
    }

    /// Whether any of `files` (pid file stems) names a live `redis-server`.
    fn any_node_alive(&self, files: &[String]) -> bool {
        (files.iter()).any(|f| alive(&self.file(&format!("{f}.pid")), "redis-server").is_some())
    }

    fn cluster_up(&self) -> Res {
        let ports = self.redis_ports.cluster;
        let files: Vec<String> = ports.iter().map(|p| format!("redis-{p}")).collect();
        let dir = self.state.join("redis-cluster");
        let fresh = !self.any_node_alive(&files);
        if fresh {
            let _ = std::fs::remove_dir_all(&dir);
            self.new_deployment()?;
        }
        let timeout = NODE_TIMEOUT_MS.to_string();
        for (port, file) in ports.iter().zip(&files) {
            let mut cmd = self.data_node(*port, &dir.join(port.to_string()))?;
            cmd.args(cluster_args())
                .args(["--cluster-node-timeout", &timeout]);
            self.start("redis-server", file, &[*port, port + 10000], &mut cmd)?;
        }
        for (port, file) in ports.iter().zip(&files) {
            let name = format!("redis cluster node {port}");
            self.wait_ready(&name, Some(file), || answers_ping(*port))?;
        }
        if fresh {
            println!("==> joining the six nodes into a cluster (3 primaries, 1 replica each)");
            create_on(&ports, 1)?;
        }
        self.wait_ready("redis cluster", None, || is_ok_on(&ports))
    }

    fn sentinel_up(&self) -> Res {
        let (data, sentinels) = (self.redis_ports.sentinel_data, self.redis_ports.sentinels);
        let data_files: Vec<String> = data.iter().map(|p| format!("redis-{p}")).collect();
        let sentinel_files: Vec<String> =
            sentinels.iter().map(|p| format!("sentinel-{p}")).collect();
        let dir = self.state.join("redis-sentinel");
        let fresh = !self.any_node_alive(&data_files) && !self.any_node_alive(&sentinel_files);
        if fresh {
            let _ = std::fs::remove_dir_all(&dir);
            self.new_deployment()?;
        }
        // The primary: the one the sentinels name, else a live server that says it is
        // one, else the first (a fresh set).
        let primary = (sentinels.iter().find_map(|&s| primary_port_at(s)))
            .or_else(|| {
                (data.iter().copied())
                    .find(|&p| answers_ping(p) && cli_at(p, &["ROLE"]).starts_with("master"))
            })
            .unwrap_or(data[0]);
        for (port, file) in data.iter().zip(&data_files) {
            let mut cmd = self.data_node(*port, &dir.join(port.to_string()))?;
            if *port != primary {
                cmd.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
            }
            self.start("redis-server", file, &[*port], &mut cmd)?;
        }
        for (port, file) in data.iter().zip(&data_files) {
            self.wait_ready(&format!("redis-server {port}"), Some(file), || {
                answers_ping(*port)
            })?;
        }
        for (port, file) in sentinels.iter().zip(&sentinel_files) {
            let home = dir.join(port.to_string());
            std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
            let conf = home.join("sentinel.conf");
            if !conf.exists() {
                std::fs::write(&conf, conf_text(*port, &home, primary, NODE_TIMEOUT_MS))
                    .map_err(|e| e.to_string())?;
            }
            let mut cmd = Command::new("redis-server");
            cmd.arg(&conf).arg("--sentinel");
            self.start("redis-server", file, &[*port], &mut cmd)?;
        }
        self.wait_ready("redis sentinels", None, || agreed_on(&data, &sentinels))
    }

    /// The pid files of the tier, of any topology: sentinels first, then data nodes.
    fn redis_pidfiles(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.state)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        names.sort();
        let stem_is = |p: &PathBuf, prefix: &str| {
            (p.file_name().and_then(|n| n.to_str()))
                .and_then(|n| n.strip_prefix(prefix)?.strip_suffix(".pid"))
                .is_some_and(|port| port.parse::<u16>().is_ok())
        };
        let sentinels = names
            .iter()
            .filter(|p| stem_is(p, "sentinel-"))
            .cloned()
            .collect();
        let mut data: Vec<PathBuf> = names
            .iter()
            .filter(|p| stem_is(p, "redis-"))
            .cloned()
            .collect();
        if self.file("redis.pid").exists() {
            data.push(self.file("redis.pid"));
        }
        (sentinels, data)
    }

    /// Stops every node of the tier, whatever its topology: the sentinels first (so
    /// that they do not fail over while the data nodes go), then the data nodes.
    pub fn redis_down(&self, grace: std::time::Duration) {
        let (sentinels, data) = self.redis_pidfiles();
        if sentinels.is_empty() && data.is_empty() {
            println!("==> redis-server not running");
        }
        if !sentinels.is_empty() {
            stop_all("redis-server", &sentinels, grace);
        }
        if !data.is_empty() {
            stop_all("redis-server", &data, grace);
        }
        let _ = std::fs::remove_file(self.mode_file());
    }

    /// `(name, pid)` of every node of the tier that has a pid file.
    pub(crate) fn redis_status(&self) -> Vec<(String, Option<u32>)> {
        let (sentinels, data) = self.redis_pidfiles();
        let mut lines: Vec<(String, Option<u32>)> = data
            .iter()
            .chain(&sentinels)
            .map(|p| {
                let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
                let name = if stem == "redis" {
                    "redis-server".to_string()
                } else {
                    stem.to_string()
                };
                (name, alive(p, "redis-server"))
            })
            .collect();
        if lines.is_empty() {
            lines.push(("redis-server".into(), None));
        }
        lines
    }
}
