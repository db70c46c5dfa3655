//! The processes of the gateway tier: the demo upstream ([`Upstream`], the fake
//! payments API of `src/bin/demo-upstream/main.rs`) and gateway replicas ([`Replica`], one
//! `idemgate serve --config FILE` each). Binaries are passed in by path. Both are
//! killed when dropped; a replica can be signalled, killed and started again with the
//! same ports and configuration, as the chaos suite does.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::net::{free_port, wait_addr, Host};

/// Sends `sig` (`STOP`, `CONT`, `TERM`, `KILL`) to `pid` with `kill`; panics when it
/// fails (the process is gone). Used by [`Replica::signal`] and
/// [`crate::RedisServer::pause`].
pub(crate) fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid} failed");
}

/// The demo upstream process.
pub struct Upstream {
    pub port: u16,
    pub host: Host,
    child: Child,
}

impl Upstream {
    /// Starts `bin` on a free port, its log in `dir/upstream.log`, with `env` (for
    /// `DEMO_FAIL_RATE`, `DEMO_RESET_RATE`, ...); returns once it listens.
    pub fn start(bin: &Path, dir: &Path, env: &[(String, String)]) -> Self {
        Self::start_on(&Host::loopback(), bin, dir, env)
    }

    /// [`Self::start`] on `host`.
    pub fn start_on(host: &Host, bin: &Path, dir: &Path, env: &[(String, String)]) -> Self {
        let port = free_port();
        let log = std::fs::File::create(dir.join("upstream.log")).unwrap();
        let child = host
            .command(bin)
            .args(["--listen", &host.addr(port).to_string()])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("demo-upstream binary");
        wait_addr(host.addr(port), Duration::from_secs(10));
        Self {
            port,
            host: host.clone(),
            child,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.host.addr(self.port))
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `idemgate serve` process: its ports, configuration file and log.
pub struct Replica {
    pub index: usize,
    pub port: u16,
    pub admin: u16,
    /// Where it runs (loopback unless placed with [`Self::on`]); its configuration
    /// must listen on this host's address.
    pub host: Host,
    pub config: PathBuf,
    pub log: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
}

impl Replica {
    /// A replica of `bin` (not started) that listens on `port` and `admin` as its
    /// `config` says, logging (appended) to `log`.
    pub fn new(
        bin: &Path,
        index: usize,
        port: u16,
        admin: u16,
        config: PathBuf,
        log: PathBuf,
    ) -> Self {
        Self {
            index,
            port,
            admin,
            host: Host::loopback(),
            config,
            log,
            bin: bin.to_path_buf(),
            child: None,
        }
    }

    /// The same replica, run on `host` (a namespace of a [`crate::NetLab`]).
    pub fn on(mut self, host: Host) -> Self {
        self.host = host;
        self
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = (self.host.command(&self.bin))
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("idemgate binary");
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.host.addr(self.port))
    }

    /// The admin listener (`/readyz`, `/metrics`).
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.host.addr(self.admin))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is alive (a stopped one counts); reaps it if it exited.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`, `KILL`).
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            signal(pid, sig);
        }
    }

    /// This replica as a server of HAProxy's backend (`r<index>`).
    pub fn backend(&self) -> crate::Backend {
        crate::Backend {
            name: format!("r{}", self.index),
            ip: self.host.ip,
            port: self.port,
            admin: self.admin,
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it (again: same ports, same configuration).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "replica {} still running", self.index);
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // A stopped process must be continued to die promptly.
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
        self.kill();
    }
}
