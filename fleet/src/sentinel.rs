//! A Redis Sentinel set on loopback: a primary, a replica (`--replicaof`) and three
//! sentinels (`redis-server <conf> --sentinel`, quorum 2, `down-after-milliseconds`
//! 1000), each on a free port in a temporary directory, killed on drop. [`SentinelSet::start`]
//! returns once every sentinel names the same primary and knows the replica and the
//! other sentinels. [`SentinelSet::failover`] asks for a failover;
//! [`SentinelSet::kill_primary`] SIGKILLs the primary so that the sentinels fail over
//! on their own. Servers keep no data across a restart (no RDB, no AOF).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::net::{free_port, Host};
use crate::redis::{answers_ping_at, cli_addr, info_addr, RedisServer};

/// The name the sentinels monitor the primary under.
pub const SERVICE_NAME: &str = "idemgate";
/// How long the primary may be silent before a sentinel calls it down.
pub const DOWN_AFTER_MS: u64 = 1000;

/// One `redis-server --sentinel`.
pub struct Sentinel {
    pub port: u16,
    pub host: Host,
    dir: TempDir,
    child: Option<Child>,
}

impl Sentinel {
    fn start(host: &Host, primary: SocketAddr) -> Self {
        for _ in 0..5 {
            let mut s = Self {
                port: free_port(),
                host: host.clone(),
                dir: tempfile::tempdir().unwrap(),
                child: None,
            };
            if s.spawn(primary) {
                return s;
            }
            s.stop();
        }
        panic!("could not start a sentinel (redis-server --sentinel)");
    }

    fn addr(&self) -> SocketAddr {
        self.host.addr(self.port)
    }

    fn spawn(&mut self, primary: SocketAddr) -> bool {
        let conf = self.dir.path().join("sentinel.conf");
        let text = conf_text_at(self.addr(), self.dir.path(), primary, DOWN_AFTER_MS);
        std::fs::write(&conf, text).unwrap();
        let log = log_file(self.dir.path());
        let child = self
            .host
            .command("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("redis-server must be on PATH");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if answers_ping_at(self.addr()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// One command through `redis-cli`.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-h",
                &self.host.ip.to_string(),
                "-p",
                &self.port.to_string(),
            ])
            .args(args)
            .output()
            .expect("redis-cli must be on PATH");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The primary's port this sentinel names now.
    pub fn primary_port(&self) -> Option<u16> {
        primary_addr_at(self.addr()).map(|a| a.port())
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The configuration file of a sentinel on 127.0.0.1:`port` (working directory `dir`,
/// which it rewrites its state into) that monitors the primary on `primary_port` as
/// [`SERVICE_NAME`] with quorum 2, calling it down after `down_after_ms` of silence.
pub(crate) fn conf_text(port: u16, dir: &Path, primary_port: u16, down_after_ms: u64) -> String {
    let lo = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    conf_text_at(lo(port), dir, lo(primary_port), down_after_ms)
}

/// [`conf_text`] for a sentinel at `at` (bound to its address, which it announces)
/// monitoring the primary at `primary`.
fn conf_text_at(at: SocketAddr, dir: &Path, primary: SocketAddr, down_after_ms: u64) -> String {
    let (ip, port) = (at.ip(), at.port());
    let (primary_ip, primary_port) = (primary.ip(), primary.port());
    format!(
        "port {port}\nbind {ip}\nprotected-mode no\ndir {dir}\nsentinel announce-ip {ip}\n\
         sentinel monitor {SERVICE_NAME} {primary_ip} {primary_port} 2\n\
         sentinel down-after-milliseconds {SERVICE_NAME} {down_after_ms}\n\
         sentinel failover-timeout {SERVICE_NAME} {failover}\n\
         sentinel parallel-syncs {SERVICE_NAME} 1\n",
        dir = dir.display(),
        failover = 4 * down_after_ms,
    )
}

/// The primary's port the sentinel on `port` names now.
pub(crate) fn primary_port_at(port: u16) -> Option<u16> {
    primary_addr_at(([127, 0, 0, 1], port).into()).map(|a| a.port())
}

/// The primary's address the sentinel at `at` names now.
fn primary_addr_at(at: SocketAddr) -> Option<SocketAddr> {
    let out = cli_addr(at, &["SENTINEL", "get-master-addr-by-name", SERVICE_NAME]);
    let mut lines = out.lines();
    let ip = lines.next()?.trim().parse().ok()?;
    Some(SocketAddr::new(ip, lines.next()?.trim().parse().ok()?))
}

/// Every sentinel on `sentinels` names the same primary among the running data servers
/// `servers`, which says it is one; every sentinel knows the others; every other server
/// is linked to the primary, synced, and known to every sentinel.
pub(crate) fn agreed_on(servers: &[u16], sentinels: &[u16]) -> bool {
    let lo = |ports: &[u16]| -> Vec<SocketAddr> {
        ports.iter().map(|&p| ([127, 0, 0, 1], p).into()).collect()
    };
    agreed_at(&lo(servers), &lo(sentinels))
}

/// [`agreed_on`] for servers and sentinels at these addresses.
fn agreed_at(servers: &[SocketAddr], sentinels: &[SocketAddr]) -> bool {
    let named: Vec<Option<SocketAddr>> = sentinels.iter().map(|&s| primary_addr_at(s)).collect();
    let Some(Some(primary)) = named.first().copied() else {
        return false;
    };
    if named.iter().any(|p| *p != Some(primary)) {
        return false;
    }
    if !servers.contains(&primary) || !cli_addr(primary, &["ROLE"]).starts_with("master") {
        return false;
    }
    let others = sentinels.len().saturating_sub(1);
    let others_known = sentinels.iter().all(|&s| {
        let known = cli_addr(s, &["SENTINEL", "sentinels", SERVICE_NAME]);
        known.lines().filter(|l| l.trim() == "name").count() >= others
    });
    let replicas = || servers.iter().filter(|&&s| s != primary);
    let replicas_linked =
        replicas().all(|&s| info_addr(s, "master_link_status").as_deref() == Some("up"));
    let replicas_known = sentinels.iter().all(|&s| {
        let known = cli_addr(s, &["SENTINEL", "replicas", SERVICE_NAME]);
        replicas().all(|r| known.contains(&r.to_string()))
    });
    others_known && replicas_linked && replicas_known
}

fn log_file(dir: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("redis.log"))
        .unwrap()
}

/// Two data servers (`servers()[0]` starts as primary) and three sentinels.
pub struct SentinelSet {
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    pub fn start() -> Self {
        let lo = Host::loopback();
        Self::start_on([&lo, &lo], [&lo, &lo, &lo])
    }

    /// The data servers on `data` (the first starts as primary) and the sentinels on
    /// `sentinels` (namespaces of a [`crate::NetLab`], or loopback).
    pub fn start_on(data: [&Host; 2], sentinels: [&Host; 3]) -> Self {
        Self::start_on_with(data, sentinels, &[])
    }

    /// [`Self::start_on`], both data servers with `extra` arguments too (e.g.
    /// [`crate::DURABLE_REDIS`]).
    pub fn start_on_with(data: [&Host; 2], sentinels: [&Host; 3], extra: &[&str]) -> Self {
        let primary = RedisServer::start_on(data[0], extra);
        let (ip, port) = (primary.host.ip.to_string(), primary.port.to_string());
        let announce = data[1].ip.to_string();
        let mut args = vec![
            "--replicaof",
            &ip,
            &port,
            "--replica-announce-ip",
            &announce,
        ];
        args.extend_from_slice(extra);
        let replica = RedisServer::start_on(data[1], &args);
        let at = primary.host.addr(primary.port);
        let sentinels = sentinels.iter().map(|h| Sentinel::start(h, at)).collect();
        let set = Self {
            servers: vec![primary, replica],
            sentinels,
        };
        set.wait_agreed(Duration::from_secs(30));
        set
    }

    /// The data servers (index 0 started as primary); see [`Self::primary`] for the current one.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    /// `redis://ADDRESS:port` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The index in [`Self::servers`] of the server the sentinels name primary.
    pub fn primary(&self) -> usize {
        let port = self
            .sentinels
            .iter()
            .find_map(Sentinel::primary_port)
            .expect("no sentinel names a primary");
        self.servers
            .iter()
            .position(|s| s.port == port)
            .expect("the sentinels name a server of another set")
    }

    /// Waits until every sentinel names the same running primary, which says it is
    /// one, every sentinel knows the other two and the replica is linked and synced.
    pub fn wait_agreed(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.agreed() {
            assert!(
                Instant::now() < deadline,
                "sentinels did not agree within {within:?}: {:?}",
                self.sentinels
                    .iter()
                    .map(Sentinel::primary_port)
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn agreed(&self) -> bool {
        let running: Vec<SocketAddr> = (self.servers.iter())
            .filter(|s| s.is_running())
            .map(|s| s.host.addr(s.port))
            .collect();
        let sentinels: Vec<SocketAddr> = self.sentinels.iter().map(Sentinel::addr).collect();
        agreed_at(&running, &sentinels)
    }

    /// Polls [`Self::primary_among`] every 100 ms until it names a primary or `within`
    /// passes; how long that took (`None`: no promotion in time).
    pub fn wait_primary_among(
        &self,
        data: &[usize],
        among: &[usize],
        within: Duration,
    ) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < within {
            if self.primary_among(data, among).is_some() {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// Whether the sentinels `among` (indexes) name a primary among the running data
    /// servers `data` that says it is one (after a partition: one side's view).
    pub fn primary_among(&self, data: &[usize], among: &[usize]) -> Option<usize> {
        let named: Vec<Option<SocketAddr>> = (among.iter())
            .map(|&i| primary_addr_at(self.sentinels[i].addr()))
            .collect();
        let first = (*named.first()?)?;
        if named.iter().any(|n| *n != Some(first)) {
            return None;
        }
        let i = (data.iter().copied())
            .find(|&i| self.servers[i].host.addr(self.servers[i].port) == first)?;
        self.servers[i]
            .cli(&["ROLE"])
            .starts_with("master")
            .then_some(i)
    }

    /// `SENTINEL FAILOVER` (the replica is promoted, the old primary demoted); waits
    /// until every sentinel names the new primary. Returns its index.
    pub fn failover(&self) -> usize {
        let before = self.primary();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.sentinels[0].cli(&["SENTINEL", "FAILOVER", SERVICE_NAME]);
            if out.starts_with("OK") || Instant::now() > deadline {
                break;
            }
            // "-NOGOODSLAVE" until the sentinel has seen the replica in sync.
            std::thread::sleep(Duration::from_millis(200));
        }
        self.wait_new_primary(before, Duration::from_secs(30))
    }

    /// SIGKILLs the primary (its data is gone) and waits until the sentinels promote
    /// the replica; returns the index of the new primary. The old one stays down until
    /// [`Self::start_again`].
    pub fn kill_primary(&mut self) -> usize {
        let before = self.primary();
        self.servers[before].stop();
        self.wait_new_primary(before, Duration::from_secs(30))
    }

    fn wait_new_primary(&self, before: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let ports: Vec<Option<u16>> =
                self.sentinels.iter().map(Sentinel::primary_port).collect();
            let port = ports[0];
            if port.is_some()
                && port != Some(self.servers[before].port)
                && ports.iter().all(|p| *p == port)
            {
                let i = self.primary();
                if self.servers[i].cli(&["ROLE"]).starts_with("master") {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no failover within {within:?}: sentinels name {ports:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts server `i` again on its port, empty; the sentinels reconfigure it as a
    /// replica of the current primary.
    pub fn start_again(&mut self, i: usize) {
        self.servers[i].start_again();
    }

    /// SIGKILL server `i` (its data is gone).
    pub fn kill(&mut self, i: usize) {
        self.servers[i].stop();
    }
}
