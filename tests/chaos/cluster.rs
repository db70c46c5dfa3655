//! One scenario's fleet, all on free loopback ports, all real processes: redis-server
//! (one, or a Redis Cluster of six nodes, or a primary and replica under three sentinels:
//! [`Topology`]),
//! PostgreSQL (`initdb` + `postgres`, optional), the demo upstream binary, N gateway
//! replicas (`idemgate serve` with a generated TOML file each) and HAProxy in front
//! (round robin, health check on each replica's admin `/readyz`). The processes are
//! the fleet launcher's parts (`fleet/`, crate `idemgate_fleet`); this file chooses
//! the scenario's options, writes the replicas' configuration and waits on them.
//! With [`Options::partitions`], every part runs in a network namespace of its own on
//! one bridge (the launcher's `NetLab`; [`Places`] names them), so that a scenario can
//! cut and heal the links between them. With [`Options::pg_ha`], Postgres is a
//! Patroni set (etcd and three nodes, the launcher's `PatroniSet`), reached through a
//! multi-host URL or through HAProxy ([`PgVia`]). Everything is killed when the
//! [`Stack`] is dropped, and the namespaces are deleted after that.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use idemgate_fleet::{
    free_port, haproxy_patroni_config, BackendProto, HaProxy, HaproxyConfig, Host, NetLab,
    PatroniOptions, PatroniSet, RedisCluster, Replica, Replication, SentinelSet, Upstream,
    SENTINEL_SERVICE,
};
use tempfile::TempDir;

use crate::faultproxy::FaultProxy;
use crate::postgres::PgServer;
use crate::redis::RedisServer;

pub const IDEMGATE: &str = env!("CARGO_BIN_EXE_idemgate");
pub const DEMO_UPSTREAM: &str = env!("CARGO_BIN_EXE_demo-upstream");

/// Where claims and completed responses live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// No `[postgres]`.
    RedisOnly,
    /// `[postgres]` with `claims = "redis"` (set explicitly: the default is `write_through`).
    Postgres,
    /// `[postgres]` with `claims = "write_through"` (the default).
    WriteThrough,
    /// As `WriteThrough`, with `redis_fill = "on_replay"`: completions write Postgres only.
    FilledOnReplay,
    /// `[postgres]` with `claims = "vouched"`, every Redis server run as the mode relies
    /// on (`idemgate_fleet::DURABLE_REDIS`: AOF fsync'd before every reply, no eviction).
    Vouched,
    /// A fleet half-way through a switch to vouched claims: replica 0 (started first)
    /// keeps `claims = "write_through"`, the others run `Vouched`.
    Mixed,
}

impl Durability {
    /// Postgres decides who holds a key: claims are committed there before forwarding.
    pub fn claims_written_through(self) -> bool {
        matches!(self, Durability::WriteThrough | Durability::FilledOnReplay)
    }

    /// Every claim is durable before it is forwarded (written through, or kept by a
    /// Redis that vouches for it): the key runs once whatever fails.
    pub fn claims_durable(self) -> bool {
        self.claims_written_through() || matches!(self, Durability::Vouched | Durability::Mixed)
    }

    /// The extra arguments of every Redis server of the fleet.
    pub fn redis_args(self) -> &'static [&'static str] {
        match self {
            Durability::Vouched | Durability::Mixed => idemgate_fleet::DURABLE_REDIS,
            _ => &[],
        }
    }
}

/// Which Redis the replicas talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One `redis-server` (`redis.mode = "standalone"`).
    Single,
    /// Six nodes, three primaries with a replica each (`redis.mode = "cluster"`).
    Cluster,
    /// A primary and a replica under three sentinels (`redis.mode = "sentinel"`).
    Sentinel,
}

/// How the replicas reach a Patroni set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgVia {
    /// `postgres://...@n0,n1,n2/idemgate?target_session_attrs=read-write`.
    MultiHost,
    /// The same, the primary at start listed first: the host a fault on the primary
    /// makes silent is the one every new connection tries first.
    MultiHostPrimaryFirst,
    /// HAProxy in TCP mode, routing to the node whose REST API says `/primary`.
    Haproxy,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub replicas: usize,
    pub topology: Topology,
    /// Extra lines in `[redis]` (`replica_acks = 1`, ...).
    pub redis: String,
    pub durability: Durability,
    /// Extra `redis-server` arguments.
    pub redis_args: Vec<String>,
    pub lock_ttl: String,
    pub upstream_timeout: String,
    /// Extra lines in `[idempotency]`.
    pub idempotency: String,
    /// Extra lines in `[postgres]` (the completer's settings, ...).
    pub postgres: String,
    /// Environment of the demo upstream (`DEMO_FAIL_RATE`, `DEMO_RESET_RATE`, ...).
    pub upstream_env: Vec<(String, String)>,
    /// Replicas whose Redis traffic goes through the fault proxy.
    pub via_fault_proxy: Vec<usize>,
    pub shutdown_grace: String,
    /// `redis.command_timeout`.
    pub command_timeout: String,
    /// HAProxy's `option abortonclose`: a client that hangs up aborts its request on
    /// the replica too (without it, HAProxy waits for the replica's answer, so the
    /// gateway never sees the hang-up).
    pub abort_on_close: bool,
    /// Extra lines in `[server]`.
    pub server: String,
    /// Extra TOML after the `payments` route (more routes, other sections).
    pub extra: String,
    /// Every part in a namespace of its own (the partition scenarios; needs root).
    pub partitions: bool,
    /// HAProxy's health checks on `/readyz` (off: every replica gets its share).
    pub health_checks: bool,
    /// Postgres as a Patroni set with this replication, reached this way (`None`: one
    /// `PgServer`).
    pub pg_ha: Option<(Replication, PgVia)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            replicas: 3,
            topology: Topology::Single,
            redis: String::new(),
            durability: Durability::Postgres,
            redis_args: Vec::new(),
            // Valid with and without the lease heartbeat: lock_ttl > upstream_timeout
            // (without it) and lock_ttl >= 3 x command_timeout (with it).
            lock_ttl: "3s".into(),
            upstream_timeout: "2s".into(),
            idempotency: String::new(),
            postgres: String::new(),
            upstream_env: Vec::new(),
            via_fault_proxy: Vec::new(),
            shutdown_grace: "5s".into(),
            command_timeout: "300ms".into(),
            abort_on_close: false,
            server: String::new(),
            extra: String::new(),
            partitions: false,
            health_checks: true,
            pg_ha: None,
        }
    }
}

/// Where each part runs: its namespace on the lab's bridge, or loopback.
#[derive(Clone, Debug)]
pub struct Places {
    /// The data nodes: one (single), six (cluster), or primary and replica (sentinel).
    pub redis: Vec<Host>,
    pub sentinels: Vec<Host>,
    pub gateways: Vec<Host>,
    pub pg: Host,
    /// The Patroni nodes and etcd ([`Options::pg_ha`]).
    pub pg_nodes: Vec<Host>,
    pub etcd: Host,
    pub upstream: Host,
    pub lb: Host,
}

impl Places {
    fn new(opts: &Options, lab: Option<&NetLab>) -> Self {
        let place = |name: String| match lab {
            Some(lab) => lab.host(&name).expect("a namespace of the lab"),
            None => Host::loopback(),
        };
        let data = match opts.topology {
            Topology::Single => 1,
            Topology::Cluster => 6,
            Topology::Sentinel => 2,
        };
        let sentinels = if opts.topology == Topology::Sentinel {
            3
        } else {
            0
        };
        Self {
            redis: (0..data).map(|i| place(format!("redis{i}"))).collect(),
            sentinels: (0..sentinels).map(|i| place(format!("sent{i}"))).collect(),
            gateways: (0..opts.replicas)
                .map(|i| place(format!("gw{i}")))
                .collect(),
            pg: place("pg".into()),
            pg_nodes: match opts.pg_ha {
                Some(_) => (0..3).map(|i| place(format!("pg{i}"))).collect(),
                None => Vec::new(),
            },
            etcd: place("etcd".into()),
            upstream: place("upstream".into()),
            lb: place("lb".into()),
        }
    }
}

/// `GET /_demo/executions`: executions per `Idempotency-Key`.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    pub total: u64,
    pub keys: HashMap<String, u64>,
    /// `--dedupe` mode only: the fencing token of each request received per key, in
    /// arrival order (empty otherwise).
    pub received: HashMap<String, Vec<i64>>,
    /// `--dedupe` mode only: requests refused for a stale fencing token.
    pub stale: u64,
}

impl Ledger {
    /// Executions beyond the first of each key.
    pub fn duplicates(&self) -> u64 {
        self.keys.values().filter(|&&n| n > 1).map(|n| n - 1).sum()
    }
}

/// What the scenarios ask a replica over HTTP, with the stack's client (the process
/// itself is the launcher's [`Replica`]).
pub trait Probe {
    async fn ready(&self, http: &reqwest::Client) -> bool;
    async fn wait_ready(&self, http: &reqwest::Client, within: Duration) -> bool;
    /// Sum of a metric over its label sets (`None` if the scrape failed).
    async fn metric(&self, http: &reqwest::Client, name: &str) -> Option<f64>;
}

impl Probe for Replica {
    async fn ready(&self, http: &reqwest::Client) -> bool {
        let url = format!("{}/readyz", self.admin_url());
        matches!(
            http.get(url).timeout(Duration::from_millis(500)).send().await,
            Ok(r) if r.status() == 200
        )
    }

    async fn wait_ready(&self, http: &reqwest::Client, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.ready(http).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    async fn metric(&self, http: &reqwest::Client, name: &str) -> Option<f64> {
        let url = format!("{}/metrics", self.admin_url());
        let text = http
            .get(url)
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        Some(
            text.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    }
}

/// The gateway configuration of replica `index` (its proxy and admin ports).
fn replica_toml(
    opts: &Options,
    index: usize,
    host: &Host,
    (port, admin): (u16, u16),
    redis: &RedisAt,
    pg: Option<&str>,
    upstream: &str,
) -> String {
    let (redis_lines, sentinel) = match redis {
        RedisAt::Url(url) => (format!("url = \"{url}\"\n"), String::new()),
        RedisAt::Cluster(nodes) => (
            format!("mode = \"cluster\"\nnodes = {nodes:?}\n"),
            String::new(),
        ),
        RedisAt::Sentinel(nodes) => (
            "mode = \"sentinel\"\n".to_string(),
            format!("[redis.sentinel]\nservice_name = \"{SENTINEL_SERVICE}\"\nnodes = {nodes:?}\n"),
        ),
    };
    let postgres = match (opts.durability, pg) {
        (Durability::RedisOnly, _) | (_, None) => String::new(),
        (d, Some(url)) => format!(
            "[postgres]\nurl = \"{url}\"\nstatement_timeout = \"1s\"\npool_size = 8\n\
             claims = \"{}\"\n{}{}\n",
            match d {
                Durability::Mixed if index == 0 => "write_through",
                Durability::Vouched | Durability::Mixed => "vouched",
                d if d.claims_written_through() => "write_through",
                _ => "redis",
            },
            if d == Durability::FilledOnReplay {
                "redis_fill = \"on_replay\"\n"
            } else {
                ""
            },
            opts.postgres,
        ),
    };
    format!(
        "[server]\nlisten = \"{ip}:{port}\"\nadmin_listen = \"{ip}:{admin}\"\n\
         shutdown_grace = \"{grace}\"\n{server}\n\
         [log]\nformat = \"text\"\nfilter = \"{filter}\"\n\
         [redis]\n{redis_lines}command_timeout = \"{ct}\"\nconnect_timeout = \"500ms\"\n\
         probe_interval = \"100ms\"\n{redis_extra}\n{sentinel}\
         {postgres}\
         [idempotency]\nttl = \"1h\"\nlock_ttl = \"{lock}\"\n{extra}\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{upstream}\"\n\
         upstream_timeout = \"{ut}\"\n{more}",
        ip = host.ip,
        redis_extra = opts.redis,
        grace = opts.shutdown_grace,
        server = opts.server,
        more = opts.extra,
        lock = opts.lock_ttl,
        extra = opts.idempotency,
        ut = opts.upstream_timeout,
        ct = opts.command_timeout,
        filter = std::env::var("CHAOS_LOG_FILTER").unwrap_or_else(|_| "info".into()),
    )
}

/// Whether this build of `idemgate` accepts the configuration of every replica
/// (`check-config`; replicas 0 and 1 stand for all: only a `Mixed` fleet's first one
/// differs): used to find out if a behaviour (lease heartbeat, `on_ambiguous`) is present.
pub fn config_accepted(opts: &Options) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    for index in 0..opts.replicas.clamp(1, 2) {
        let path = dir.path().join(format!("check{index}.toml"));
        let toml = replica_toml(
            opts,
            index,
            &Host::loopback(),
            (8080, 9090),
            &RedisAt::Url("redis://127.0.0.1:6379".into()),
            Some("postgres://postgres@127.0.0.1:5432/postgres"),
            "http://127.0.0.1:3000",
        );
        std::fs::write(&path, toml).unwrap();
        let out = Command::new(IDEMGATE)
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
    }
    Ok(())
}

/// Where a replica finds Redis, as its `[redis]` section says.
enum RedisAt {
    Url(String),
    Cluster(Vec<String>),
    Sentinel(Vec<String>),
}

type Postgres = (
    Option<PgServer>,
    Option<PatroniSet>,
    Option<HaProxy>,
    Option<String>,
);

/// The durable tier: none, one server, or a Patroni set (and HAProxy in front of it)
/// with the URL the replicas use.
fn start_postgres(opts: &Options, places: &Places, dir: &Path) -> Postgres {
    if opts.durability == Durability::RedisOnly {
        return (None, None, None, None);
    }
    let Some((replication, via)) = opts.pg_ha else {
        return (Some(PgServer::start_on(&places.pg)), None, None, None);
    };
    let set = PatroniSet::start(PatroniOptions {
        nodes: places.pg_nodes.len(),
        replication,
        etcd_host: places.etcd.clone(),
        hosts: places.pg_nodes.clone(),
        ..PatroniOptions::default()
    });
    if via == PgVia::MultiHost {
        let url = set.url_multi_host();
        return (None, Some(set), None, Some(url));
    }
    if via == PgVia::MultiHostPrimaryFirst {
        let primary = set.primary().expect("a Patroni primary at start");
        let url = set.url_multi_host_from(&primary);
        return (None, Some(set), None, Some(url));
    }
    let port = free_port();
    let text = haproxy_patroni_config(places.lb.addr(port), &set.haproxy_backends());
    let lb = HaProxy::start_text(dir, "pg-haproxy", &places.lb, port, &text);
    let front = places.lb.addr(port);
    assert!(
        PatroniSet::wait_primary_at(front, Duration::from_secs(20)),
        "HAProxy in front of Patroni never reached only the primary"
    );
    let url = PatroniSet::url_via(places.lb.addr(port));
    (None, Some(set), Some(lb), Some(url))
}

pub struct Stack {
    pub haproxy: Option<HaProxy>,
    pub replicas: Vec<Replica>,
    pub upstream: Upstream,
    pub fault: Option<FaultProxy>,
    pub pg: Option<PgServer>,
    /// [`Options::pg_ha`]: the Patroni set, and HAProxy in front of it ([`PgVia::Haproxy`]).
    pub patroni: Option<PatroniSet>,
    pub _pg_lb: Option<HaProxy>,
    /// The one server of [`Topology::Single`] (started, unused, in the others).
    pub redis: RedisServer,
    /// [`Topology::Cluster`].
    pub redis_cluster: Option<RedisCluster>,
    /// [`Topology::Sentinel`].
    pub sentinels: Option<SentinelSet>,
    pub http: reqwest::Client,
    pub dir: TempDir,
    /// Where each part runs.
    pub places: Places,
    /// The namespaces and their cuts ([`Options::partitions`]); declared last, so it is
    /// dropped after every process in it.
    pub lab: Option<NetLab>,
}

impl Stack {
    pub async fn start(opts: Options) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let lab = opts
            .partitions
            .then(|| NetLab::new().unwrap_or_else(|e| panic!("no network lab: {e}")));
        let places = Places::new(&opts, lab.as_ref());
        let durable = opts.durability.redis_args();
        let mut redis_args: Vec<&str> = durable.to_vec();
        redis_args.extend(opts.redis_args.iter().map(String::as_str));
        let redis = match opts.topology {
            Topology::Single => RedisServer::start_on(&places.redis[0], &redis_args),
            _ => RedisServer::start_with(&redis_args),
        };
        let redis_cluster = (opts.topology == Topology::Cluster)
            .then(|| RedisCluster::start_on_with(&places.redis, 1, durable));
        let sentinels = (opts.topology == Topology::Sentinel).then(|| {
            let (d, s) = (&places.redis, &places.sentinels);
            SentinelSet::start_on_with([&d[0], &d[1]], [&s[0], &s[1], &s[2]], durable)
        });
        let (pg, patroni, pg_lb, ha_url) = start_postgres(&opts, &places, dir.path());
        let upstream = Upstream::start_on(
            &places.upstream,
            Path::new(DEMO_UPSTREAM),
            dir.path(),
            &opts.upstream_env,
        );
        let fault = if opts.via_fault_proxy.is_empty() {
            None
        } else {
            Some(FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await)
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let mut replicas = Vec::new();
        for index in 0..opts.replicas {
            let (port, admin) = (free_port(), free_port());
            let redis_url = match (&fault, &redis_cluster, &sentinels) {
                (_, Some(c), _) => RedisAt::Cluster(c.seed_urls()),
                (_, _, Some(s)) => RedisAt::Sentinel(s.sentinel_urls()),
                (Some(f), _, _) if opts.via_fault_proxy.contains(&index) => {
                    RedisAt::Url(f.redis_url())
                }
                _ => RedisAt::Url(redis.url()),
            };
            let pg_url = pg.as_ref().map(|p| p.url()).or(ha_url.clone());
            let host = &places.gateways[index];
            let toml = replica_toml(
                &opts,
                index,
                host,
                (port, admin),
                &redis_url,
                pg_url.as_deref(),
                &upstream.url(),
            );
            let config = dir.path().join(format!("replica{index}.toml"));
            std::fs::write(&config, toml).unwrap();
            let log = dir.path().join(format!("replica{index}.log"));
            let mut r =
                Replica::new(Path::new(IDEMGATE), index, port, admin, config, log).on(host.clone());
            r.start();
            // One at a time: migrations on start take an advisory lock anyway.
            if !r.wait_ready(&http, Duration::from_secs(20)).await {
                panic!("replica {index} not ready; its log:\n{}", r.log_text());
            }
            replicas.push(r);
        }
        let backends = replicas.iter().map(Replica::backend).collect();
        let haproxy = HaProxy::start(
            dir.path(),
            &HaproxyConfig {
                host: places.lb.clone(),
                port: free_port(),
                backends,
                abort_on_close: opts.abort_on_close,
                health_checks: opts.health_checks,
                proto: BackendProto::Http1,
            },
        );
        let stack = Self {
            haproxy: Some(haproxy),
            replicas,
            upstream,
            fault,
            pg,
            patroni,
            _pg_lb: pg_lb,
            redis,
            redis_cluster,
            sentinels,
            http,
            dir,
            places,
            lab,
        };
        stack.wait_front(Duration::from_secs(10)).await;
        stack
    }

    /// Whether the replicas have a `[postgres]` (one server or a Patroni set).
    pub fn has_postgres(&self) -> bool {
        self.pg.is_some() || self.patroni.is_some()
    }

    /// `FLUSHALL` on every primary of the topology (the durable pass).
    pub fn flush_redis(&self) {
        let primaries: Vec<String> = match (&self.redis_cluster, &self.sentinels) {
            (Some(c), _) => (c.primaries().into_iter())
                .map(|i| c.nodes()[i].cli(&["FLUSHALL"]))
                .collect(),
            (_, Some(s)) => vec![s.servers()[s.primary()].cli(&["FLUSHALL"])],
            _ => vec![self.redis.cli(&["FLUSHALL"])],
        };
        for flushed in primaries {
            assert_eq!(flushed.trim(), "OK", "FLUSHALL: {flushed}");
        }
    }

    /// HAProxy's address: what the driver talks to.
    pub fn front(&self) -> String {
        self.haproxy.as_ref().unwrap().url()
    }

    pub fn replica_urls(&self) -> Vec<String> {
        self.replicas.iter().map(Replica::url).collect()
    }

    /// Until an unkeyed GET through the front reaches the upstream.
    pub async fn wait_front(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let r = self
                .http
                .get(format!("{}/v1/ping", self.front()))
                .send()
                .await;
            if matches!(r, Ok(r) if r.status() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("front (HAProxy) does not reach the upstream");
    }

    /// Until every running replica says ready.
    pub async fn wait_all_ready(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        for i in 0..self.replicas.len() {
            if !self.replicas[i].running() {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !self.replicas[i].wait_ready(&self.http, left).await {
                return false;
            }
        }
        true
    }

    pub async fn ledger(&self) -> Ledger {
        let v: serde_json::Value = self
            .http
            .get(format!("{}/_demo/executions", self.upstream.url()))
            .send()
            .await
            .expect("demo upstream answers")
            .json()
            .await
            .unwrap();
        let keys = v["keys"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
            .collect();
        let received = match v.get("received") {
            Some(r) => serde_json::from_value(r.clone()).unwrap(),
            None => HashMap::new(),
        };
        Ledger {
            total: v["total"].as_u64().unwrap(),
            keys,
            received,
            stale: v["stale"].as_u64().unwrap_or(0),
        }
    }

    /// Until every running replica's write-through retry queue is empty.
    pub async fn wait_queues_drained(&mut self, within: Duration) -> bool {
        if !self.has_postgres() {
            return true;
        }
        let deadline = Instant::now() + within;
        loop {
            let mut pending = 0.0;
            for i in 0..self.replicas.len() {
                if !self.replicas[i].running() {
                    continue;
                }
                let depth = self.replicas[i]
                    .metric(&self.http, "idemgate_write_through_queue_depth")
                    .await;
                pending += depth.unwrap_or(1.0);
            }
            if pending == 0.0 {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sum of a metric over the running replicas.
    pub async fn metric_sum(&mut self, name: &str) -> f64 {
        let mut sum = 0.0;
        for i in 0..self.replicas.len() {
            if self.replicas[i].running() {
                sum += self.replicas[i]
                    .metric(&self.http, name)
                    .await
                    .unwrap_or(0.0);
            }
        }
        sum
    }

    /// Every replica's log, concatenated.
    pub fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("=== replica {} ===\n{}", r.index, r.log_text()))
            .collect()
    }

    /// Keeps the stack's logs when `report` failed, or always with `CHAOS_KEEP_LOGS`
    /// set, and says where in the report's details.
    pub fn keep_logs_of(&self, report: &mut crate::checker::Report, scenario: &str) {
        if report.verdict() == "FAIL" || std::env::var_os("CHAOS_KEEP_LOGS").is_some() {
            let dir = self.keep_logs(scenario);
            report
                .details
                .push(format!("logs kept in {}", dir.display()));
        }
    }

    /// Keeps the logs of a failed scenario under target/tmp for inspection.
    pub fn keep_logs(&self, scenario: &str) -> PathBuf {
        let dest = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("chaos-logs")
            .join(scenario.replace(['[', ']', '=', ' '], "_"));
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::create_dir_all(&dest).unwrap();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let _ = std::fs::copy(entry.path(), dest.join(entry.file_name()));
        }
        dest
    }
}
