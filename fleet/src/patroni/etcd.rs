//! One etcd member (etcd 3.4, v3 API only) for a [`super::PatroniSet`]: client and peer
//! ports on a [`Host`], data in a directory it is given, killed on drop.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::net::{free_port, Host};

/// A running `etcd`.
pub struct Etcd {
    pub host: Host,
    pub client_port: u16,
    pub peer_port: u16,
    dir: PathBuf,
    own_group: bool,
    child: Option<Child>,
}

impl Etcd {
    /// Starts etcd on `host`, data in `dir/etcd`, log in `dir/etcd.log`; `ports` fixed
    /// (client, peer) or free ones; returns once it answers `/health`. `own_group`: in
    /// a process group of its own (it outlives a Ctrl-C of the launcher).
    pub fn start(host: &Host, dir: &Path, ports: Option<(u16, u16)>, own_group: bool) -> Self {
        for _ in 0..5 {
            let (client_port, peer_port) = ports.unwrap_or_else(|| (free_port(), free_port()));
            let mut etcd = Self {
                host: host.clone(),
                client_port,
                peer_port,
                dir: dir.to_path_buf(),
                own_group,
                child: None,
            };
            if etcd.spawn() {
                return etcd;
            }
            etcd.kill();
            if ports.is_some() {
                break;
            }
        }
        panic!("etcd did not start; see {}", dir.join("etcd.log").display());
    }

    /// `IP:client_port`, as Patroni's `etcd3.hosts` wants it.
    pub fn endpoint(&self) -> String {
        self.host.addr(self.client_port).to_string()
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .unwrap();
        let client = format!("http://{}", self.host.addr(self.client_port));
        let peer = format!("http://{}", self.host.addr(self.peer_port));
        let mut cmd = self.host.command("etcd");
        if self.own_group {
            cmd.process_group(0);
        }
        let child = cmd
            .args(["--name", "etcd0", "--data-dir"])
            .arg(self.dir.join("etcd"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("etcd0={peer}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("etcd must be installed (apt-get install etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            let health = super::rest::get(self.host.addr(self.client_port), "/health");
            if health.is_some_and(|(status, body)| status == 200 && body.contains("true")) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The process id (for `make up`'s pid file).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Leaves the process running when this is dropped (`make up`).
    pub fn detach(&mut self) {
        self.child = None;
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
