//! The fleet of `make bench` on fixed loopback ports ([`ports`]), with its state in
//! `.state/bench/` (pid files in `run/`, logs in `raw/`, generated configurations), one
//! part at a time, so that the driver (`loadtest/bench/bench.py`) starts and stops
//! replicas between rows while the stores keep running. The driver only measures; every
//! process it measures is started here:
//!
//! - `redis`: as vouched claims rely on it (the AOF fsync'd before every reply,
//!   `noeviction`) with one replica, `redis-replica` ([`durable_redis`]); every per-slot
//!   warmth marker two days in the past, written by this server process (older than the
//!   longest ttl; [`warm`]), so that `lookup_on_miss = "when_cold"` counts Redis as warm,
//!   and 4.3 M expiring filler keys (a busy production Redis, whose hash tables do not
//!   grow during the rows);
//! - `redis-cluster`: three empty primaries `redis-shard-1..3` ([`cluster`]), for the
//!   rows that run on Redis Cluster (`redis.mode = "cluster"`);
//! - `patroni`: etcd and three Patroni nodes with synchronous replication
//!   ([`patroni`]), for the rows that write through to a highly available Postgres;
//! - `postgres`: a fresh cluster per start (initdb), durable defaults (`fsync`,
//!   `synchronous_commit` on), placed as `make up` places it ([`crate::local`]'s
//!   cluster: under /var/tmp when the `postgres` account cannot reach the checkout),
//!   and `seed-postgres` fills its records table to production size ([`seeded`]);
//! - `upstream` (`demo-upstream --latency 0ms`), `nginx` (the baseline, from
//!   `loadtest/bench/nginx.conf`), `peer` ([`peer`]);
//! - gateway replicas `gw-1..gw-N` with a row's [`GatewayOptions`] (run by another
//!   binary when it names one: the last release's, `tests/upgrade/build-base.sh`), and
//!   `haproxy` in front of them (from `loadtest/bench/haproxy.cfg`).
//!
//! `idemgate-fleet soak ...` ([`soak`]) starts the fleet of `make soak` from these parts
//! on ports of its own.
//!
//! Parts are detached (own process group) and named by pid files, as `make up`'s are;
//! [`Bench::down`] stops whatever is left (replicas first, stores last).

mod cli;
mod cluster;
pub mod durable_redis;
mod gateway_config;
mod h2c_load;
mod parts;
mod patroni;
pub mod peer;
mod seeded;
pub mod soak;
pub mod warm;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::haproxy::binary as haproxy_bin;
use crate::local::daemon::{launch, pid_alive, read_pid, wait_exit};
use crate::local::pg::Cluster;
use crate::net::{http_status, port_open};
pub use cli::main;
pub use gateway_config::{GatewayOptions, Ports};

/// The bench's fixed loopback ports.
pub mod ports {
    pub const UPSTREAM: u16 = 18000;
    pub const NGINX: u16 = 18001;
    pub const HAPROXY: u16 = 18002;
    pub const PEER: u16 = 18003;
    /// HAProxy's runtime API (admin level), when started for a rolling restart.
    pub const HAPROXY_ADMIN: u16 = 18004;
    /// The trace receiver (OTLP/HTTP) of the rows that export spans.
    pub const OTLP: u16 = 18005;
    pub const REDIS: u16 = 16390;
    /// The replica of [`REDIS`] (it acknowledges vouched claims: `WAIT 1`).
    pub const REDIS_REPLICA: u16 = 16394;
    /// The three primaries of the bench's Redis Cluster (bus ports + 10000).
    pub const REDIS_CLUSTER: [u16; 3] = [16391, 16392, 16393];
    pub const POSTGRES: u16 = 15490;
    /// The Patroni set: etcd (client, peer), each node's Postgres and REST API.
    pub const PATRONI_ETCD: (u16, u16) = (12379, 12380);
    pub const PATRONI_PG: [u16; 3] = [15491, 15492, 15493];
    pub const PATRONI_REST: [u16; 3] = [18031, 18032, 18033];
    /// Replica i (1-based) listens on 18010 + i.
    pub const GATEWAY_BASE: u16 = 18010;
    pub fn gateway(i: u16) -> u16 {
        super::Ports::BENCH.gateway(i)
    }
    /// Replica i has its admin listener on 18020 + i.
    pub const ADMIN_BASE: u16 = 18020;
    pub fn admin(i: u16) -> u16 {
        super::Ports::BENCH.admin(i)
    }
    pub const MAX_REPLICAS: u16 = 9;
}

type Res = Result<(), String>;

/// The bench fleet of one checkout.
pub struct Bench {
    pub root: PathBuf,
    pub state: PathBuf,
    pub idemgate: PathBuf,
    pub upstream: PathBuf,
    pub peer: PathBuf,
    pub ready_timeout: Duration,
}

/// What a part's program is called in `/proc/PID/cmdline` (guards against pid reuse).
fn program(name: &str) -> &str {
    match name {
        n if durable_redis::is_part(n) || cluster::is_shard(n) => "redis-server",
        "upstream" => "demo-upstream",
        "peer" => "idempotent-proxy-server",
        "otlp" => "idemgate-fleet",
        n if n.starts_with("gw-") => "idemgate",
        n => patroni::program(n).unwrap_or(n),
    }
}

fn is_ours(pid: u32, name: &str) -> bool {
    pid_alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(program(name)))
}

impl Bench {
    /// The bench of the checkout at `root` (binaries as `loadtest/bench/run.sh` builds and
    /// installs them; `IDEMGATE_BIN`, `UPSTREAM_BIN`, `PEER_BIN` override).
    pub fn new(root: &Path) -> Self {
        let bin = |var: &str, default: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join(default))
        };
        Self {
            root: root.to_path_buf(),
            state: root.join(".state/bench"),
            idemgate: bin("IDEMGATE_BIN", "target/release/idemgate"),
            upstream: bin("UPSTREAM_BIN", "target/release/demo-upstream"),
            peer: bin("PEER_BIN", ".state/bench/peer/bin/idempotent-proxy-server"),
            ready_timeout: Duration::from_secs(30),
        }
    }

    fn pidfile(&self, name: &str) -> PathBuf {
        self.state.join("run").join(format!("{name}.pid"))
    }

    fn log(&self, name: &str) -> PathBuf {
        self.state.join("raw").join(format!("{name}.log"))
    }

    /// Running parts and their pids, by name (sorted).
    pub fn running(&self) -> Vec<(String, u32)> {
        let mut found: Vec<(String, u32)> = std::fs::read_dir(self.state.join("run"))
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.strip_suffix(".pid")?.to_string();
                let pid = read_pid(&p)?;
                is_ours(pid, &name).then_some((name, pid))
            })
            .collect();
        if found.iter().any(|(n, _)| n.starts_with("patroni-pg")) {
            found.extend(self.patroni_postmasters());
        }
        found.sort();
        found
    }

    /// Launches `cmd` as part `name` on `ports` (refused if taken), then polls `ready`.
    fn start(&self, name: &str, ports: &[u16], cmd: &mut Command, ready: impl Fn() -> bool) -> Res {
        if let Some(pid) = read_pid(&self.pidfile(name)).filter(|p| is_ours(*p, name)) {
            return Err(format!(
                "{name} is already running (pid {pid}); stop it first"
            ));
        }
        if let Some(p) = ports.iter().find(|p| port_open(**p)) {
            return Err(format!(
                "{name}: port 127.0.0.1:{p} is in use; stop what holds it first"
            ));
        }
        for d in ["run", "raw"] {
            std::fs::create_dir_all(self.state.join(d)).map_err(|e| e.to_string())?;
        }
        eprintln!("==> starting {name} (log: {})", self.log(name).display());
        let pid = launch(name, &self.pidfile(name), &self.log(name), cmd);
        let deadline = Instant::now() + self.ready_timeout;
        while !ready() {
            if !pid_alive(pid) {
                return Err(format!(
                    "{name} exited during start-up; see {}",
                    self.log(name).display()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!("{name} not ready after {:?}", self.ready_timeout));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// A fresh Postgres cluster with durable defaults.
    pub fn start_postgres(&self) -> Res {
        self.start_postgres_on(ports::POSTGRES)
    }

    /// A fresh Postgres cluster with durable defaults on `port`.
    fn start_postgres_on(&self, port: u16) -> Res {
        let mut cluster = Cluster::of(&self.state);
        if cluster.running() {
            return Err("postgres is already running; stop it first".into());
        }
        if cluster.data().exists() {
            std::fs::remove_dir_all(cluster.data()).map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(self.state.join("raw")).map_err(|e| e.to_string())?;
        cluster.place(&self.state)?;
        cluster.init(&self.log("initdb"))?;
        if port_open(port) {
            return Err(format!("postgres: port 127.0.0.1:{port} is in use"));
        }
        eprintln!("==> starting postgres (log: {})", cluster.log().display());
        cluster.start(port, self.ready_timeout.as_secs())?;
        // pg_ctl forks the postmaster: its pid is the first line of postmaster.pid.
        let pid = std::fs::read_to_string(cluster.data().join("postmaster.pid"))
            .map_err(|e| e.to_string())?;
        let pid = pid.lines().next().unwrap_or_default().trim().to_string();
        std::fs::create_dir_all(self.state.join("run")).map_err(|e| e.to_string())?;
        std::fs::write(self.pidfile("postgres"), format!("{pid}\n")).map_err(|e| e.to_string())
    }

    /// Stops the named parts (`gateways` names every replica, `redis` the bench's Redis
    /// and its replica, `redis-cluster` every cluster node, any part of the Patroni set the whole set): SIGTERM (SIGINT, a fast
    /// shutdown, for postgres), then SIGKILL after 10 s.
    pub fn stop(&self, names: &[String]) {
        if names.iter().any(|n| patroni::is_part(n)) {
            self.stop_patroni();
        }
        let running: Vec<(String, u32)> = (self.running().into_iter())
            .filter(|(n, _)| !patroni::is_part(n))
            .collect();
        let pick = |n: &str| {
            names.iter().any(|w| {
                w == n
                    || (w == "gateways" && n.starts_with("gw-"))
                    || (w == "redis" && durable_redis::is_part(n))
                    || (w == "redis-cluster" && cluster::is_shard(n))
            })
        };
        let chosen: Vec<&(String, u32)> = running.iter().filter(|(n, _)| pick(n)).collect();
        for (name, pid) in &chosen {
            let sig = if name == "postgres" { "-INT" } else { "-TERM" };
            eprintln!("==> stopping {name} (pid {pid})");
            let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
        }
        let pids: Vec<u32> = chosen.iter().map(|(_, p)| *p).collect();
        wait_exit(Duration::from_secs(10), "bench part", &pids);
        for name in names {
            let _ = std::fs::remove_file(self.pidfile(name));
        }
        for (name, _) in chosen {
            let _ = std::fs::remove_file(self.pidfile(name));
        }
    }

    /// Stops everything: load balancers and replicas first, stores last; removes a
    /// Postgres cluster placed under /var/tmp.
    pub fn down(&self) {
        let all: Vec<String> = self.running().into_iter().map(|(n, _)| n).collect();
        let (stores, front): (Vec<String>, Vec<String>) = all.into_iter().partition(|n| {
            durable_redis::is_part(n)
                || n == "postgres"
                || cluster::is_shard(n)
                || patroni::is_part(n)
        });
        self.stop(&front);
        self.stop(&stores);
        let cluster = Cluster::of(&self.state);
        if cluster.running() {
            cluster.stop(10);
        }
        if cluster.home != self.state && cluster.home.starts_with("/var/tmp") {
            let _ = std::fs::remove_dir_all(&cluster.home);
            let _ = std::fs::remove_file(self.state.join("pg.home"));
        }
    }
}
