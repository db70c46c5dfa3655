//! The Postgres tier of the local fleet (`make up POSTGRES=single|patroni`):
//!
//! - `single` (the default): one server on 5490 ([`super::pg`]);
//! - `patroni`: a [`PatroniSet`] with synchronous replication on fixed ports
//!   ([`patroni_ports`]; etcd's are not a system etcd's 2379; the list is in
//!   docs/operations.md, "The local fleet"), its state in
//!   `.state/patroni/` (or, under root when the `postgres` account cannot reach
//!   `.state`, in a directory under /var/tmp named in `.state/patroni.home`). Pid files
//!   `etcd.pid` and `patroni-pgN.pid`. The replicas reach the primary through the
//!   multi-host URL (`target_session_attrs=read-write`, [`Local::pg_env`]), not
//!   through HAProxy. `down` stops every patroni (each stops its Postgres), kills any
//!   postmaster left, then etcd; the data is kept.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::daemon::{pid_alive, read_pid};
use super::{Local, Res};
use crate::patroni::{stop_detached, PatroniOptions, PatroniPorts, PatroniSet, Replication};

/// `POSTGRES`: which Postgres the local fleet runs on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PgTier {
    #[default]
    Single,
    Patroni,
}

impl PgTier {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "single" => Ok(Self::Single),
            "patroni" => Ok(Self::Patroni),
            other => Err(format!(
                "POSTGRES must be single or patroni (got '{other}')"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Patroni => "patroni",
        }
    }
}

/// Nodes of the local Patroni set.
pub const PATRONI_NODES: usize = 3;

/// `make up POSTGRES=patroni`'s ports.
pub fn patroni_ports() -> PatroniPorts {
    PatroniPorts {
        etcd: (2389, 2390),
        pg: vec![5491, 5492, 5493],
        rest: vec![8008, 8009, 8010],
    }
}

/// The multi-host URL of a local Patroni set on `ports`.
pub fn patroni_url(ports: &PatroniPorts) -> String {
    let hosts: Vec<String> = (ports.pg.iter())
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    format!(
        "postgres://postgres@{}/{}?target_session_attrs=read-write",
        hosts.join(","),
        crate::patroni::DATABASE
    )
}

/// Whether `pid` runs Patroni (`python3 /usr/bin/patroni CONFIG`).
fn is_patroni(pid: u32) -> bool {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    pid_alive(pid) && String::from_utf8_lossy(&cmd).contains("patroni")
}

impl Local {
    fn patroni_home(&self) -> PathBuf {
        std::fs::read_to_string(self.file("patroni.home"))
            .map(|s| PathBuf::from(s.trim()))
            .unwrap_or_else(|_| self.state.join("patroni"))
    }

    fn patroni_pidfiles(&self) -> Vec<(String, PathBuf)> {
        let mut files = vec![("etcd".to_string(), self.file("etcd.pid"))];
        for i in 0..PATRONI_NODES {
            files.push((format!("pg{i}"), self.file(&format!("patroni-pg{i}.pid"))));
        }
        files
    }

    /// (part, live pid) for etcd and each Patroni node.
    pub fn patroni_pids(&self) -> Vec<(String, Option<u32>)> {
        (self.patroni_pidfiles().into_iter())
            .map(|(name, f)| {
                let pid = read_pid(&f).filter(|p| match name.as_str() {
                    "etcd" => super::daemon::program_is(*p, "etcd") && pid_alive(*p),
                    _ => is_patroni(*p),
                });
                (name, pid)
            })
            .collect()
    }

    /// Under root, a state directory the `postgres` account cannot enter sends the set
    /// to /var/tmp (named in `.state/patroni.home`).
    fn place_patroni(&self) -> Res {
        let home = self.patroni_home();
        if home.exists() || crate::postgres_owner().is_none() {
            return Ok(());
        }
        let cluster = super::pg::Cluster::of(&self.state);
        let reachable =
            (crate::postgres::pg_command(std::path::Path::new("/usr/bin"), "test", cluster.owner))
                .arg("-x")
                .arg(&self.state)
                .status()
                .is_ok_and(|s| s.success());
        if reachable {
            return Ok(());
        }
        let out = Command::new("mktemp")
            .args(["-d", "/var/tmp/idemgate-patroni.XXXXXX"])
            .output()
            .map_err(|e| format!("mktemp: {e}"))?;
        let home = String::from_utf8_lossy(&out.stdout).trim().to_string();
        std::fs::write(self.file("patroni.home"), format!("{home}\n"))
            .map_err(|e| e.to_string())?;
        println!("==> the postgres account cannot reach .state; the Patroni set goes to {home}");
        Ok(())
    }

    /// Starts etcd and the Patroni nodes (unless all run) and waits for a leader, its
    /// replicas and the database.
    pub fn patroni_up(&self) -> Res {
        let pids = self.patroni_pids();
        if pids.iter().all(|(_, p)| p.is_some()) {
            println!("==> patroni set already running");
            return Ok(());
        }
        if pids.iter().any(|(_, p)| p.is_some()) {
            return Err("part of the Patroni set runs: stop it with `make down` first".into());
        }
        let ports = self.patroni_ports.clone();
        if let Some(p) = ports.first_taken() {
            return Err(format!(
                "patroni: port 127.0.0.1:{p} is already in use by a process not started by make up"
            ));
        }
        std::fs::create_dir_all(&self.state).map_err(|e| e.to_string())?;
        self.place_patroni()?;
        let dir = self.patroni_home();
        println!(
            "==> starting etcd and {PATRONI_NODES} Patroni nodes (logs: {0}/etcd.log, {0}/pg*/patroni.log)",
            dir.display()
        );
        let set = PatroniSet::start(PatroniOptions {
            nodes: PATRONI_NODES,
            replication: Replication::Sync,
            ports: Some(ports),
            dir: Some(dir),
            ..PatroniOptions::default()
        });
        println!(
            "==> patroni set ready: primary {}",
            set.primary().unwrap_or_default()
        );
        for (name, pid) in set.detach() {
            let file = match name.as_str() {
                "etcd" => self.file("etcd.pid"),
                node => self.file(&format!("patroni-{node}.pid")),
            };
            std::fs::write(file, format!("{pid}\n")).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Stops every Patroni node (each stops its Postgres), what is left of Postgres,
    /// then etcd.
    pub fn patroni_down(&self, grace: Duration) {
        let pids = self.patroni_pids();
        if pids.iter().all(|(_, p)| p.is_none()) {
            for (_, f) in self.patroni_pidfiles() {
                let _ = std::fs::remove_file(f);
            }
            return;
        }
        let nodes: Vec<u32> = (pids.iter())
            .filter(|(n, _)| n != "etcd")
            .filter_map(|(_, p)| *p)
            .collect();
        println!(
            "==> stopping {} Patroni node(s) (SIGTERM: each stops its Postgres)",
            nodes.len()
        );
        let etcd = (pids.iter().find(|(n, _)| n == "etcd")).and_then(|(_, p)| *p);
        let waits = (grace + Duration::from_secs(10), grace);
        let home = self.patroni_home();
        stop_detached(&home, PATRONI_NODES, &nodes, etcd, waits, |l| {
            println!("{l}")
        });
        for (_, f) in self.patroni_pidfiles() {
            let _ = std::fs::remove_file(f);
        }
    }

    /// `idemgate-fleet status`'s Patroni lines: each part's pid, then the members
    /// (role, state, lag) and the primary as Patroni's REST API says.
    pub fn patroni_status(&self) -> (Vec<(String, Option<u32>)>, Vec<String>) {
        let parts = (self.patroni_pids().into_iter())
            .map(|(n, p)| {
                (
                    if n == "etcd" {
                        n
                    } else {
                        format!("patroni {n}")
                    },
                    p,
                )
            })
            .collect();
        let mut lines = Vec::new();
        let rest = &self.patroni_ports.rest;
        let members = (rest.iter())
            .find_map(|p| crate::patroni::cluster_at(([127, 0, 0, 1], *p).into()))
            .unwrap_or_default();
        for m in &members {
            let lag = m.lag.map_or("-".to_string(), |l| format!("{l} B"));
            lines.push(format!(
                "  {:<6} {:<13} {:<9} 127.0.0.1:{:<5} timeline {:<3} lag {lag}",
                m.name,
                m.role,
                m.state,
                m.port,
                m.timeline.map_or("-".into(), |t| t.to_string())
            ));
        }
        let primary = members
            .iter()
            .find(|m| m.is_leader())
            .map(|m| m.name.as_str());
        lines.push(format!("  primary: {}", primary.unwrap_or("none")));
        (parts, lines)
    }
}
