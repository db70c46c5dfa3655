//! The bench's Patroni set (`bench start patroni`, for the `first-patroni*` rows and
//! their latency paths only): etcd and three nodes ([`crate::patroni::PatroniSet`]) on
//! the fixed ports [`ports::PATRONI_ETCD`], [`ports::PATRONI_PG`] and
//! [`ports::PATRONI_REST`], synchronous replication, `fsync` on (the durable defaults of
//! the bench's single server), fresh state in `patroni/` beside the bench's Postgres
//! cluster (`.state/bench/`, or its /var/tmp home), the database migrated
//! (`idemgate migrate` through the multi-host URL, [`url`]).
//!
//! Its parts: `patroni-etcd` and `patroni-pg0..2` (pid files, as every part), and
//! `postgres-ha-pg0..2`, each node's postmaster, read from its `postmaster.pid` at each
//! [`Bench::running`] (Patroni may restart Postgres; the driver adds the postmasters'
//! children for its CPU column). `bench stop patroni` stops the patroni processes (each
//! stops its Postgres), any postmaster left, then etcd. `bench patroni-replication
//! sync|async` switches the running set ([`crate::patroni::set_synchronous_mode`]) so
//! one set serves both rows.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{ports, Bench, GatewayOptions, Res};
use crate::local::pg::Cluster;
use crate::patroni::node::{kill_postgres, postmaster};
use crate::patroni::{
    node_data, set_synchronous_mode, stop_detached, PatroniOptions, PatroniPorts, PatroniSet,
    Replication,
};

/// Nodes of the bench's set.
pub const NODES: usize = 3;

/// The set's fixed ports.
pub fn patroni_ports() -> PatroniPorts {
    PatroniPorts {
        etcd: ports::PATRONI_ETCD,
        pg: ports::PATRONI_PG.to_vec(),
        rest: ports::PATRONI_REST.to_vec(),
    }
}

/// The multi-host URL the rows' gateways get (`target_session_attrs=read-write`).
pub fn url() -> String {
    crate::local::patroni_url(&patroni_ports())
}

/// Whether part `name` belongs to the set (`patroni` names them all).
pub fn is_part(name: &str) -> bool {
    name == "patroni" || name.starts_with("patroni-") || name.starts_with("postgres-ha-")
}

/// The program of a part of the set, as `/proc/PID/cmdline` shows it.
pub fn program(name: &str) -> Option<&'static str> {
    match name {
        "patroni-etcd" => Some("etcd"),
        n if n.starts_with("patroni-") => Some("patroni"),
        n if n.starts_with("postgres-ha-") => Some("postgres"),
        _ => None,
    }
}

fn node_name(i: usize) -> String {
    format!("pg{i}")
}

impl Bench {
    fn patroni_dir(&self) -> PathBuf {
        Cluster::of(&self.state).home.join("patroni")
    }

    /// (`postgres-ha-pgN`, postmaster pid) of every node whose Postgres runs.
    pub(super) fn patroni_postmasters(&self) -> Vec<(String, u32)> {
        let dir = self.patroni_dir();
        (0..NODES)
            .filter_map(|i| {
                let pid = postmaster(&node_data(&dir, i))?;
                Some((format!("postgres-ha-{}", node_name(i)), pid))
            })
            .collect()
    }

    /// Starts the set (refused while any part of it runs or a port is taken), waits
    /// for a leader, its replicas (one synchronous) and the database, then migrates.
    pub fn start_patroni(&self) -> Res {
        if let Some((name, pid)) = self.running().into_iter().find(|(n, _)| is_part(n)) {
            return Err(format!(
                "{name} is already running (pid {pid}); stop patroni first"
            ));
        }
        let pp = patroni_ports();
        if let Some(p) = pp.first_taken() {
            return Err(format!(
                "patroni: port 127.0.0.1:{p} is in use; stop what holds it first"
            ));
        }
        for d in ["run", "raw"] {
            std::fs::create_dir_all(self.state.join(d)).map_err(|e| e.to_string())?;
        }
        Cluster::of(&self.state).place(&self.state)?;
        let dir = self.patroni_dir();
        if dir.exists() {
            // A postmaster left by an earlier set killed outright (its ports are free).
            for i in 0..NODES {
                kill_postgres(&node_data(&dir, i));
            }
            std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        eprintln!(
            "==> starting etcd and {NODES} Patroni nodes, synchronous (logs: {0}/etcd.log, {0}/pg*/patroni.log)",
            dir.display()
        );
        let set = PatroniSet::start(PatroniOptions {
            nodes: NODES,
            replication: Replication::Sync,
            ports: Some(pp),
            dir: Some(dir),
            fsync: true,
            ..PatroniOptions::default()
        });
        eprintln!(
            "==> patroni set ready: primary {}",
            set.primary().unwrap_or_default()
        );
        for (name, pid) in set.detach() {
            let part = format!("patroni-{name}");
            std::fs::write(self.pidfile(&part), format!("{pid}\n")).map_err(|e| e.to_string())?;
        }
        self.migrate_patroni().inspect_err(|_| self.stop_patroni())
    }

    /// `idemgate migrate` through the multi-host URL.
    fn migrate_patroni(&self) -> Res {
        let config = self.state.join("idemgate-migrate-patroni.toml");
        let opts = GatewayOptions::default();
        std::fs::write(&config, opts.render(true)).map_err(|e| e.to_string())?;
        let out = Command::new(&self.idemgate)
            .arg("migrate")
            .arg("--config")
            .arg(&config)
            .env("IDEMGATE__POSTGRES__URL", url())
            .env("NO_COLOR", "1")
            .output()
            .map_err(|e| format!("{}: {e}", self.idemgate.display()))?;
        if !out.status.success() {
            return Err(format!(
                "idemgate migrate on the Patroni set failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        eprintln!("==> patroni set migrated ({})", url());
        Ok(())
    }

    /// Synchronous or asynchronous replication on the running set; returns once the
    /// members show it.
    pub fn patroni_replication(&self, replication: Replication) -> Res {
        let rests: Vec<_> = (ports::PATRONI_REST.iter())
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        let sync = replication == Replication::Sync;
        set_synchronous_mode(&rests, sync, Duration::from_secs(30))?;
        eprintln!("==> patroni set: {} replication", replication.as_str());
        Ok(())
    }

    /// Stops every patroni (SIGTERM: each stops its Postgres), kills any postmaster
    /// left, then etcd; removes the set's pid files.
    pub(super) fn stop_patroni(&self) {
        let running = self.running();
        let nodes: Vec<u32> = (running.iter())
            .filter(|(n, _)| n.starts_with("patroni-pg"))
            .map(|(_, p)| *p)
            .collect();
        for pid in &nodes {
            eprintln!("==> stopping patroni (pid {pid}; it stops its Postgres)");
        }
        let etcd = (running.iter().find(|(n, _)| n == "patroni-etcd")).map(|(_, p)| *p);
        let waits = (Duration::from_secs(20), Duration::from_secs(10));
        stop_detached(&self.patroni_dir(), NODES, &nodes, etcd, waits, |l| {
            eprintln!("{l}")
        });
        let _ = std::fs::remove_file(self.pidfile("patroni-etcd"));
        for i in 0..NODES {
            let _ = std::fs::remove_file(self.pidfile(&format!("patroni-{}", node_name(i))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_and_ports_of_the_set() {
        assert!(is_part("patroni") && is_part("patroni-etcd") && is_part("postgres-ha-pg2"));
        assert!(!is_part("postgres") && !is_part("gw-1") && !is_part("redis"));
        assert_eq!(program("patroni-etcd"), Some("etcd"));
        assert_eq!(program("patroni-pg1"), Some("patroni"));
        assert_eq!(program("postgres-ha-pg0"), Some("postgres"));
        assert_eq!(program("postgres"), None);
        assert_eq!(
            url(),
            "postgres://postgres@127.0.0.1:15491,127.0.0.1:15492,127.0.0.1:15493/idemgate\
             ?target_session_attrs=read-write"
        );
    }
}
