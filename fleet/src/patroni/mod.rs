//! PostgreSQL made highly available by Patroni, as self-hosted production runs it: a
//! [`PatroniSet`] is one etcd (v3 API, [`Etcd`]) and N nodes (default 3), each a
//! `patroni` process (run as the `postgres` account) managing its own Postgres, with
//! synchronous replication by default ([`Replication`]). Timeouts are small
//! ([`TTL`]: a dead primary's leader key expires within 6 s and a replica takes over).
//! Every part runs on a [`Host`] (loopback, or a namespace of a [`crate::NetLab`], so
//! a test can cut the primary off from etcd and the gateways), on free ports in a
//! temporary directory the set owns, or on fixed ports in a given directory (`make
//! up`). Dropping the set kills every patroni, postgres and etcd process it started.
//!
//! Gateways reach the primary through [`PatroniSet::url_multi_host`]
//! (`target_session_attrs=read-write`) or through HAProxy asking each node's REST API
//! (`crate::haproxy_patroni_config`). Faults: [`PatroniSet::kill_primary`] (host loss),
//! [`PatroniSet::switchover`] (planned), [`PatroniSet::restart_node`] (back as a replica);
//! on a lab, a node's host cut off or powered off ([`crate::NetLab::power_off`]: its
//! packets dropped, so it is silent rather than refusing).

mod access;
mod etcd;
mod faults;
pub(crate) mod node;
mod rest;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub use etcd::Etcd;
pub use faults::{node_data, stop_detached};
pub use node::TTL;
pub use rest::{set_synchronous_mode, Member};

use crate::net::{free_port, Host};
use node::{Node, NodeSpec};

/// The database the gateways use, created once the first leader is up.
pub const DATABASE: &str = "idemgate";

/// How the primary's commits reach the replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Replication {
    /// Patroni's `synchronous_mode: true`: a commit returns once a standby has it.
    #[default]
    Sync,
    /// Asynchronous streaming: a failover may lose the last commits.
    Async,
}

impl Replication {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Async => "async",
        }
    }
}

/// Fixed ports (`make up`): etcd's client and peer ports, then one Postgres and one
/// REST port per node.
#[derive(Clone, Debug)]
pub struct PatroniPorts {
    pub etcd: (u16, u16),
    pub pg: Vec<u16>,
    pub rest: Vec<u16>,
}

impl PatroniPorts {
    /// The first of these ports something already listens on.
    pub fn first_taken(&self) -> Option<u16> {
        let etcd = [self.etcd.0, self.etcd.1].into_iter();
        (etcd
            .chain(self.pg.iter().copied())
            .chain(self.rest.iter().copied()))
        .find(|p| crate::net::port_open(*p))
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct PatroniOptions {
    pub nodes: usize,
    pub replication: Replication,
    /// Where etcd runs.
    pub etcd_host: Host,
    /// Where each node runs (empty: every node on loopback).
    pub hosts: Vec<Host>,
    /// Fixed ports (`None`: free ones).
    pub ports: Option<PatroniPorts>,
    /// A directory to keep the state in (`None`: a temporary one, deleted on drop).
    /// With one, every process runs in a process group of its own, so that it
    /// outlives a Ctrl-C or hang-up of the launcher (`make up`; see [`PatroniSet::detach`]).
    pub dir: Option<PathBuf>,
    /// Postgres' `fsync`: off for the tests (speed), on for `make bench` (durable
    /// defaults, as its single server runs).
    pub fsync: bool,
}

impl Default for PatroniOptions {
    fn default() -> Self {
        Self {
            nodes: 3,
            replication: Replication::Sync,
            etcd_host: Host::loopback(),
            hosts: Vec::new(),
            ports: None,
            dir: None,
            fsync: false,
        }
    }
}

/// The members as the Patroni REST API on `rest` lists them (`GET /cluster`).
pub fn cluster_at(rest: std::net::SocketAddr) -> Option<Vec<Member>> {
    match rest::get(rest, "/cluster") {
        Some((200, body)) => rest::members(&body),
        _ => None,
    }
}

/// etcd and the Patroni nodes; killed on drop.
pub struct PatroniSet {
    pub replication: Replication,
    nodes: Vec<Node>,
    etcd: Etcd,
    dir: PathBuf,
    _temp: Option<TempDir>,
}

/// Who may connect to the nodes: loopback, or every address of the lab.
fn clients(hosts: &[Host]) -> String {
    match hosts.iter().find(|h| h.netns.is_some()) {
        Some(h) => {
            let [a, b, ..] = h.ip.octets();
            format!("{a}.{b}.0.0/16")
        }
        None => "127.0.0.1/32".into(),
    }
}

impl PatroniSet {
    /// Starts etcd and every node; returns once there is a leader, every replica
    /// follows it (one of them synchronously with [`Replication::Sync`]) and the
    /// [`DATABASE`] exists. Panics after 60 s.
    pub fn start(opts: PatroniOptions) -> Self {
        let set = Self::launch(opts);
        let deadline = Instant::now() + Duration::from_secs(60);
        // The leader Patroni names may not take connections yet: a set started again
        // over its data can name the last run's leader before that node's Postgres is
        // up. So the leader is asked again until one takes the database.
        let leader = loop {
            let leader = set.wait_leader(deadline.saturating_duration_since(Instant::now()));
            match set.create_database(&leader) {
                Ok(()) => break leader,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "CREATE DATABASE on {leader}: {e}; logs in {}",
                        set.dir.display()
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        };
        assert!(
            set.wait_replicas(Duration::from_secs(60)),
            "the replicas did not follow {leader}: {:?}; logs in {}",
            set.members(),
            set.dir.display()
        );
        set
    }

    /// Starts the processes without waiting for a leader.
    pub fn launch(opts: PatroniOptions) -> Self {
        let temp = opts.dir.is_none().then(|| tempfile::tempdir().unwrap());
        let dir = opts
            .dir
            .clone()
            .unwrap_or_else(|| temp.as_ref().unwrap().path().to_path_buf());
        std::fs::create_dir_all(&dir).unwrap();
        let owner = crate::postgres_owner();
        if let Some((uid, gid)) = owner {
            // The nodes' directories are below it: the account must get through.
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        }
        let fixed = opts.ports.as_ref();
        let own_group = opts.dir.is_some();
        let etcd = Etcd::start(&opts.etcd_host, &dir, fixed.map(|p| p.etcd), own_group);
        let hosts: Vec<Host> = (0..opts.nodes)
            .map(|i| opts.hosts.get(i).cloned().unwrap_or_else(Host::loopback))
            .collect();
        let mut nodes: Vec<Node> = (0..opts.nodes)
            .map(|i| {
                let spec = NodeSpec {
                    name: format!("pg{i}"),
                    host: hosts[i].clone(),
                    pg_port: fixed.map_or_else(free_port, |p| p.pg[i]),
                    rest_port: fixed.map_or_else(free_port, |p| p.rest[i]),
                    etcd: etcd.endpoint(),
                    replication: opts.replication,
                    dir: dir.join(format!("pg{i}")),
                    clients: clients(&hosts),
                    fsync: opts.fsync,
                };
                Node::new(spec, owner, own_group)
            })
            .collect();
        // All at once: whichever takes the initialize key in etcd runs initdb; the
        // others wait for it to lead, then clone it (pg_basebackup).
        for node in &mut nodes {
            node.start();
        }
        Self {
            replication: opts.replication,
            nodes,
            etcd,
            dir,
            _temp: temp,
        }
    }

    /// Where the logs and data are.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.spec.name.clone()).collect()
    }

    fn node(&self, name: &str) -> &Node {
        (self.nodes.iter().find(|n| n.spec.name == name))
            .unwrap_or_else(|| panic!("no Patroni node {name}"))
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        (self.nodes.iter_mut().find(|n| n.spec.name == name))
            .unwrap_or_else(|| panic!("no Patroni node {name}"))
    }

    /// The host node `name` runs on (what a partition cuts).
    pub fn host_of(&self, name: &str) -> &Host {
        &self.node(name).spec.host
    }

    /// Node `name`'s Postgres address (`ip:port`) and REST address.
    pub fn addrs_of(&self, name: &str) -> (std::net::SocketAddr, std::net::SocketAddr) {
        let s = &self.node(name).spec;
        (s.host.addr(s.pg_port), s.host.addr(s.rest_port))
    }

    /// The members as the first node that answers `GET /cluster` sees them (empty when
    /// none answers).
    pub fn members(&self) -> Vec<Member> {
        (self.nodes.iter())
            .find_map(|n| cluster_at(n.spec.host.addr(n.spec.rest_port)))
            .unwrap_or_default()
    }

    /// The one node whose REST API answers `GET /primary` with 200 (what HAProxy asks),
    /// if exactly one does: a node cut off from etcd may still believe it leads for a
    /// moment, and its `/cluster` view is stale, so each node speaks for itself.
    pub fn primary(&self) -> Option<String> {
        let leading: Vec<String> = (self.nodes.iter())
            .filter(|n| {
                let rest = n.spec.host.addr(n.spec.rest_port);
                matches!(rest::get(rest, "/primary"), Some((200, _)))
            })
            .map(|n| n.spec.name.clone())
            .collect();
        match <[String; 1]>::try_from(leading) {
            Ok([one]) => Some(one),
            Err(_) => None,
        }
    }

    /// Until a leader runs; its name. Panics after `within`.
    pub fn wait_leader(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.primary() {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no Patroni leader after {within:?}; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Until a leader other than `old` runs (`None` after `within`).
    pub fn wait_new_primary(&self, old: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.primary() {
                Some(p) if p != old => return Some(p),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        None
    }

    /// Until every running node other than the leader replicates (and, with
    /// [`Replication::Sync`], one is the synchronous standby).
    pub fn wait_replicas(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let expected = self.nodes.iter().filter(|n| n.pid().is_some()).count();
        while Instant::now() < deadline {
            let m = self.members();
            let following = m.iter().filter(|m| m.is_replicating()).count();
            let sync = m.iter().any(|m| m.role == "sync_standby");
            let led = m.iter().any(Member::is_leader);
            if led && following + 1 >= expected && (sync || self.replication == Replication::Async)
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Creates [`DATABASE`] on `leader` unless it exists; psql's error otherwise.
    fn create_database(&self, leader: &str) -> Result<(), String> {
        let exists = self.psql(
            leader,
            "postgres",
            &format!("SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"),
        )?;
        if exists != "1" {
            self.psql(leader, "postgres", &format!("CREATE DATABASE {DATABASE}"))?;
        }
        Ok(())
    }
}

impl Drop for PatroniSet {
    fn drop(&mut self) {
        // The nodes first (each kills its patroni, then its postgres); etcd last.
        self.nodes.clear();
    }
}
