//! The local fleet of `make up` on fixed loopback ports, with its state in `.state/`
//! at the repository root, laid out as `deploy/local/up.sh` lays it out (so either can
//! stop what the other started): one pid file and one log per process
//! (`redis`, `upstream`, `gateway-<i>`, `haproxy`, `prometheus`, `traces`: the trace
//! receiver, whose spans go to `traces.jsonl`), the Postgres cluster
//! in `.state/pg` (see [`pg`]), generated `haproxy.cfg` and Prometheus targets. The
//! Redis tier is one server, a Redis Cluster or a Sentinel set ([`redis_tier`], `REDIS=`);
//! the Postgres tier one server or a Patroni set ([`pg_tier`], `POSTGRES=`);
//! HAProxy speaks HTTP/1.1 or HTTP/2 to the replicas ([`BackendProto`], `PROTO=`).
//! [`Local::up`] is safe to run twice (a part whose pid file names a live process is
//! left alone); [`Local::down`] stops the replicas first so they drain while the stores
//! are still up. Installing packages and building the binaries stay with the caller.

pub(crate) mod daemon;
mod fronts;
pub(crate) mod pg;
pub mod pg_tier;
pub mod redis_tier;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::haproxy::{binary as haproxy_bin, render_local, Backend, BackendProto};
use crate::net::{http_status, port_open};
use daemon::{alive, launch, stop, stop_all};
pub use pg::PG_BIN;
pub use pg_tier::{patroni_ports, patroni_url, PgTier};
pub use redis_tier::{RedisPorts, Topology};

pub const REDIS_PORT: u16 = 6390;
pub const PG_PORT: u16 = 5490;
pub const UPSTREAM_PORT: u16 = 3000;
/// HAProxy; replica i listens on LB_PORT + i.
pub const LB_PORT: u16 = 8080;
pub const LB_STATS_PORT: u16 = 8404;
pub const PROM_PORT: u16 = 9099;
/// The trace receiver (OTLP/HTTP's own port).
pub const TRACES_PORT: u16 = 4318;
/// Replica i has its admin listener on ADMIN_BASE + i.
pub const ADMIN_BASE: u16 = 9090;
/// Replica 9 would take 9099, Prometheus' port.
pub const MAX_REPLICAS: u16 = 8;

/// The local fleet of one checkout.
pub struct Local {
    pub root: PathBuf,
    pub state: PathBuf,
    /// Where `idemgate` and `demo-upstream` are (`target/release`).
    pub bin_dir: PathBuf,
    pub config: PathBuf,
    pub replicas: u16,
    pub ready_timeout: Duration,
    /// The Redis tier's topology and ports.
    pub redis: Topology,
    pub redis_ports: RedisPorts,
    /// What HAProxy speaks to the replicas (HTTP/1.1 unless `PROTO=h2`).
    pub proto: BackendProto,
    /// One Postgres server, or a Patroni set (`POSTGRES=patroni`) on these ports.
    pub postgres: PgTier,
    pub patroni_ports: crate::PatroniPorts,
}

type Res = Result<(), String>;

impl Local {
    pub fn new(root: &Path, bin_dir: &Path, config: &Path, replicas: u16) -> Self {
        Self {
            root: root.to_path_buf(),
            state: root.join(".state"),
            bin_dir: bin_dir.to_path_buf(),
            config: config.to_path_buf(),
            replicas,
            ready_timeout: Duration::from_secs(30),
            redis: Topology::Standalone,
            redis_ports: RedisPorts::FIXED,
            proto: BackendProto::Http1,
            postgres: PgTier::Single,
            patroni_ports: patroni_ports(),
        }
    }

    /// The `IDEMGATE__POSTGRES__URL` that points a replica (and `migrate`) at the
    /// Patroni set's multi-host URL; none for the single server (the configuration
    /// file's URL).
    fn pg_env(&self) -> Vec<(&'static str, String)> {
        match self.postgres {
            PgTier::Single => vec![],
            PgTier::Patroni => vec![("IDEMGATE__POSTGRES__URL", patroni_url(&self.patroni_ports))],
        }
    }

    fn postgres_up(&self) -> Res {
        if self.postgres == PgTier::Patroni {
            return self.patroni_up();
        }
        let mut cluster = pg::Cluster::of(&self.state);
        cluster.place(&self.state)?;
        cluster.init(&self.file("initdb.log"))?;
        if cluster.running() {
            println!("==> postgres already running");
        } else {
            if port_open(PG_PORT) {
                return Err(format!("postgres: port 127.0.0.1:{PG_PORT} is already in use by a process not started by make up"));
            }
            println!("==> starting postgres (log: {})", cluster.log().display());
            cluster.start(PG_PORT, self.ready_timeout.as_secs())?;
        }
        self.wait_ready("postgres", None, || cluster.accepting(PG_PORT))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.state.join(name)
    }

    /// Starts `name` unless its pid file names it alive; refuses a port taken by
    /// something else.
    fn start(&self, name: &str, file: &str, ports: &[u16], cmd: &mut Command) -> Res {
        let pidfile = self.file(&format!("{file}.pid"));
        if let Some(pid) = alive(&pidfile, name) {
            println!("==> {name} already running (pid {pid})");
            return Ok(());
        }
        let _ = std::fs::remove_file(&pidfile);
        if let Some(p) = ports.iter().find(|p| port_open(**p)) {
            return Err(format!(
                "{name}: port 127.0.0.1:{p} is already in use by a process not started by make up"
            ));
        }
        println!("==> starting {name} (log: .state/{file}.log)");
        launch(name, &pidfile, &self.file(&format!("{file}.log")), cmd);
        Ok(())
    }

    /// Polls `ready` until it holds; fails when the process exits or time runs out.
    fn wait_ready(&self, name: &str, file: Option<&str>, ready: impl Fn() -> bool) -> Res {
        let deadline = Instant::now() + self.ready_timeout;
        while !ready() {
            let pid = file.and_then(|f| daemon::read_pid(&self.file(&format!("{f}.pid"))));
            if file.is_some() && !pid.is_some_and(daemon::pid_alive) {
                return Err(format!(
                    "{name} exited during startup; see its log in .state/"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{name} not ready after {:?}; stop with make down",
                    self.ready_timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        println!("==> {name} ready");
        Ok(())
    }

    fn gateway_pidfiles(&self) -> Vec<(u16, PathBuf)> {
        let mut found: Vec<(u16, PathBuf)> = std::fs::read_dir(&self.state)
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| {
                let n = p
                    .file_name()?
                    .to_str()?
                    .strip_prefix("gateway-")?
                    .strip_suffix(".pid")?;
                Some((n.parse().ok()?, p))
            })
            .collect();
        found.sort();
        found
    }

    /// Starts whatever is not running; see `deploy/local/up.sh` for the ports.
    pub fn up(&self) -> Res {
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(format!(
                "REPLICAS must be a number from 1 to {MAX_REPLICAS}"
            ));
        }
        let idemgate = self.bin_dir.join("idemgate");
        let upstream = self.bin_dir.join("demo-upstream");
        if !idemgate.exists() || !upstream.exists() {
            return Err(format!(
                "{}/{{idemgate,demo-upstream}} missing",
                self.bin_dir.display()
            ));
        }
        self.redis_up()?;
        self.postgres_up()?;

        println!("==> applying database migrations");
        let migrated = Command::new(&idemgate)
            .arg("migrate")
            .arg("--config")
            .arg(&self.config)
            .envs(self.pg_env())
            .status();
        if !migrated.is_ok_and(|s| s.success()) {
            return Err("idemgate migrate failed".into());
        }

        let mut up = Command::new(&upstream);
        up.args(["--listen", &format!("127.0.0.1:{UPSTREAM_PORT}")]);
        self.start("demo-upstream", "upstream", &[UPSTREAM_PORT], &mut up)?;
        let health =
            || http_status(UPSTREAM_PORT, "/_demo/health", Duration::from_secs(2)) == Some(200);
        self.wait_ready("demo-upstream", Some("upstream"), health)?;

        self.start_traces()?;
        self.start_replicas(&idemgate)?;
        self.start_haproxy()?;
        let surplus: Vec<PathBuf> = (self.gateway_pidfiles().into_iter())
            .filter(|(n, _)| *n > self.replicas)
            .map(|(_, p)| p)
            .collect();
        if !surplus.is_empty() {
            println!("==> stopping {} surplus gateway replica(s)", surplus.len());
            stop_all("idemgate", &surplus, Duration::from_secs(35));
        }
        self.start_prometheus()?;
        println!("\nidemgate local fleet is up ({} replicas, Redis {}, Postgres {}, HAProxy to replicas {}): gateway http://127.0.0.1:{LB_PORT}; stop with make down", self.replicas, self.redis.as_str(), self.postgres.as_str(), self.proto.as_str());
        Ok(())
    }

    fn start_replicas(&self, idemgate: &Path) -> Res {
        let legacy = self.file("gateway.pid");
        if legacy.exists() {
            println!("==> stopping the gateway of the earlier single-gateway layout");
            stop_all("idemgate", &[legacy], Duration::from_secs(35));
        }
        for i in 1..=self.replicas {
            let (port, admin) = (LB_PORT + i, ADMIN_BASE + i);
            let mut cmd = Command::new(idemgate);
            cmd.arg("serve")
                .arg("--config")
                .arg(&self.config)
                .env("NO_COLOR", "1")
                .env("IDEMGATE__SERVER__LISTEN", format!("127.0.0.1:{port}"))
                .env(
                    "IDEMGATE__SERVER__ADMIN_LISTEN",
                    format!("127.0.0.1:{admin}"),
                )
                .envs(self.redis.gateway_env(&self.redis_ports))
                .envs((self.key_prefix()).map(|p| ("IDEMGATE__REDIS__KEY_PREFIX", p)))
                .envs(self.pg_env());
            self.start(
                "idemgate",
                &format!("gateway-{i}"),
                &[port, admin],
                &mut cmd,
            )?;
        }
        for i in 1..=self.replicas {
            let ready =
                || http_status(ADMIN_BASE + i, "/readyz", Duration::from_secs(2)) == Some(200);
            self.wait_ready(
                &format!("idemgate replica {i}"),
                Some(&format!("gateway-{i}")),
                ready,
            )?;
        }
        Ok(())
    }

    /// Stops everything `up` started: replicas first, Postgres and Redis last.
    pub fn down(&self, grace: Duration, gateway_grace: Duration) {
        let gateways: Vec<PathBuf> = self
            .gateway_pidfiles()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let mut gateways = gateways;
        if self.file("gateway.pid").exists() {
            gateways.push(self.file("gateway.pid"));
        }
        if gateways.is_empty() {
            println!("==> idemgate not running");
        } else {
            stop_all("idemgate", &gateways, gateway_grace);
        }
        stop("demo-upstream", &self.file("upstream.pid"), grace);
        stop("haproxy", &self.file("haproxy.pid"), grace);
        if self.file("haproxy-old.pid").exists() {
            stop("haproxy", &self.file("haproxy-old.pid"), grace);
        }
        stop("prometheus", &self.file("prometheus.pid"), grace);
        stop("idemgate-fleet", &self.file("traces.pid"), grace);
        let cluster = pg::Cluster::of(&self.state);
        if cluster.running() {
            cluster.stop(grace.as_secs());
        } else {
            println!("==> postgres not running");
        }
        self.patroni_down(grace);
        self.redis_down(grace);
        println!("==> local fleet stopped");
    }

    /// One line per part: running (with its pid) or not.
    pub fn status(&self) -> bool {
        let mut all = true;
        let mut line = |name: &str, pid: Option<u32>| {
            all &= pid.is_some();
            match pid {
                Some(pid) => println!("{name:<14} running (pid {pid})"),
                None => println!("{name:<14} not running"),
            }
        };
        for (name, pid) in self.redis_status() {
            line(&name, pid);
        }
        let (patroni, members) = self.patroni_status();
        if self.postgres == PgTier::Patroni || patroni.iter().any(|(_, p)| p.is_some()) {
            for (name, pid) in patroni {
                line(&name, pid);
            }
            println!("patroni members (GET /cluster):");
            for m in members {
                println!("{m}");
            }
        } else {
            let cluster = pg::Cluster::of(&self.state);
            let pg_pid = std::fs::read_to_string(cluster.data().join("postmaster.pid")).ok();
            line(
                "postgres",
                cluster
                    .running()
                    .then(|| pg_pid?.lines().next()?.parse().ok())
                    .flatten(),
            );
        }
        line(
            "demo-upstream",
            alive(&self.file("upstream.pid"), "demo-upstream"),
        );
        for (i, f) in self.gateway_pidfiles() {
            line(&format!("replica {i}"), alive(&f, "idemgate"));
        }
        line("haproxy", alive(&self.file("haproxy.pid"), "haproxy"));
        line(
            "prometheus",
            alive(&self.file("prometheus.pid"), "prometheus"),
        );
        line("traces", alive(&self.file("traces.pid"), "idemgate-fleet"));
        all
    }
}
