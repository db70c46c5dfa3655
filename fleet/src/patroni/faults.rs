//! What happens to a [`PatroniSet`]'s nodes: host loss ([`PatroniSet::kill_primary`],
//! [`PatroniSet::kill_node`]), the way back ([`PatroniSet::restart_node`]), a planned
//! [`PatroniSet::switchover`], a change of [`Replication`]
//! ([`PatroniSet::set_replication`]), leaving the set running for `make up` and the
//! bench ([`PatroniSet::detach`]), and stopping a set left running ([`stop_detached`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::node::kill_postgres;
use super::{rest, PatroniSet, Replication};
use crate::local::daemon::wait_exit;

/// The data directory of node `i` of a set kept in `dir`.
pub fn node_data(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("pg{i}")).join("data")
}

/// Stops a set left running by [`PatroniSet::detach`] in `dir`: SIGTERM to each of its
/// `patroni` processes (each stops its Postgres), waited for up to `waits.0`; a
/// postmaster left of any of its `nodes` is killed; then etcd (SIGTERM, waited for up to
/// `waits.1`). `say` prints what is done.
pub fn stop_detached(
    dir: &Path,
    nodes: usize,
    patroni: &[u32],
    etcd: Option<u32>,
    waits: (Duration, Duration),
    say: fn(String),
) {
    for pid in patroni {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    wait_exit(waits.0, "patroni", patroni);
    for i in 0..nodes {
        kill_postgres(&node_data(dir, i));
    }
    if let Some(etcd) = etcd {
        say(format!("==> stopping etcd (pid {etcd})"));
        let _ = Command::new("kill")
            .args(["-TERM", &etcd.to_string()])
            .status();
        wait_exit(waits.1, "etcd", &[etcd]);
    }
}

impl PatroniSet {
    /// Host loss of the primary: its patroni and every postgres process SIGKILLed. The
    /// others take over once the leader key expires ([`TTL`]). Returns its name.
    pub fn kill_primary(&mut self) -> String {
        let primary = self.primary().expect("no primary to kill");
        self.kill_node(&primary);
        primary
    }

    /// SIGKILLs node `name`'s patroni and postgres.
    pub fn kill_node(&mut self, name: &str) {
        self.node_mut(name).kill();
    }

    /// Starts node `name` again (after [`Self::kill_node`]): Patroni rewinds it if
    /// needed and it rejoins as a replica.
    pub fn restart_node(&mut self, name: &str) {
        let node = self.node_mut(name);
        if !node.running() {
            node.kill();
            node.start();
        }
    }

    /// A planned switchover (`POST /switchover` on the leader, as `patronictl
    /// switchover --force` does); returns the new primary once it runs. Panics when
    /// Patroni refuses or nobody takes over within 30 s.
    pub fn switchover(&self) -> String {
        let old = self.primary().expect("no primary to switch over from");
        let (_, rest) = self.addrs_of(&old);
        let body = format!("{{\"leader\": \"{old}\"}}");
        let answer = rest::call(rest, "POST", "/switchover", &body, Duration::from_secs(40));
        assert!(
            matches!(answer, Some((200, _))),
            "switchover refused: {answer:?}"
        );
        self.wait_new_primary(&old, Duration::from_secs(30))
            .expect("no new primary 30 s after the switchover")
    }

    /// Switches the running set to `replication` (Patroni's `synchronous_mode`, through
    /// `PATCH /config`); returns once the members show it.
    pub fn set_replication(&mut self, replication: Replication) -> Result<(), String> {
        let rests: Vec<_> = self.names().iter().map(|n| self.addrs_of(n).1).collect();
        let sync = replication == Replication::Sync;
        rest::set_synchronous_mode(&rests, sync, Duration::from_secs(30))?;
        self.replication = replication;
        Ok(())
    }

    /// Leaves every process running when this is dropped (`make up`, which stops them
    /// by their pid files): (name, pid) of etcd and of each patroni.
    pub fn detach(mut self) -> Vec<(String, u32)> {
        let mut pids = vec![("etcd".to_string(), self.etcd.pid().unwrap_or(0))];
        self.etcd.detach();
        for node in &mut self.nodes {
            pids.push((node.spec.name.clone(), node.pid().unwrap_or(0)));
            node.detach();
        }
        self.nodes.clear();
        pids
    }
}
