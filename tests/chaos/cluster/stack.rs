//! A scenario's fleet started and stopped ([`Stack`]): Redis in its topology, the durable
//! tier, the upstream, the replicas and HAProxy, and what a scenario asks of them while
//! it runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idemgate_fleet::{
    free_port, haproxy_patroni_config, BackendProto, HaProxy, HaproxyConfig, NetLab,
    PatroniOptions, PatroniSet, RedisCluster, Replica, SentinelSet, Upstream,
};
use tempfile::TempDir;

use crate::faultproxy::FaultProxy;
use crate::postgres::PgServer;
use crate::redis::RedisServer;

use super::*;

/// Where a replica finds Redis, as its `[redis]` section says.
pub(super) enum RedisAt {
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
