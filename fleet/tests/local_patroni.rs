//! The Postgres tier of `make up POSTGRES=patroni` (`local::pg_tier`), started by the
//! launcher on free ports in a temporary state directory: it serves the database on
//! the multi-host URL, a second start leaves it alone, `status` names the primary, the
//! stop leaves no patroni, postgres or etcd process behind, and a start after the stop
//! comes back on the kept data.

use std::time::Duration;

use idemgate_fleet::local::{patroni_url, Local, PgTier};
use idemgate_fleet::{free_port, PatroniPorts, PatroniSet};

/// Stops the set even when an assertion fails (its processes are detached).
struct Tier(Local);

impl Drop for Tier {
    fn drop(&mut self) {
        self.0.patroni_down(Duration::from_secs(5));
    }
}

fn processes_under(dir: &str) -> usize {
    let mut found = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        found += String::from_utf8_lossy(&cmd).contains(dir) as usize;
    }
    found
}

#[test]
fn the_local_patroni_tier_starts_once_reports_its_primary_and_stops() {
    let root = tempfile::tempdir().unwrap();
    let mut local = Local::new(root.path(), root.path(), &root.path().join("x.toml"), 1);
    local.postgres = PgTier::Patroni;
    local.patroni_ports = PatroniPorts {
        etcd: (free_port(), free_port()),
        pg: (0..3).map(|_| free_port()).collect(),
        rest: (0..3).map(|_| free_port()).collect(),
    };
    let url = patroni_url(&local.patroni_ports);
    assert!(
        url.ends_with("/idemgate?target_session_attrs=read-write"),
        "{url}"
    );
    let tier = Tier(local);
    tier.0.patroni_up().unwrap();
    assert!(tier.0.patroni_pids().iter().all(|(_, p)| p.is_some()));
    // Running: a second start is a no-op.
    tier.0.patroni_up().unwrap();
    let (_, members) = tier.0.patroni_status();
    assert_eq!(members.len(), 4, "{members:?}");
    let primary = members.last().unwrap().trim().strip_prefix("primary: pg");
    assert!(primary.is_some(), "{members:?}");
    let pg = tier.0.patroni_ports.pg[0];
    let answer = PatroniSet::psql_at(([127, 0, 0, 1], pg).into(), "idemgate", "SELECT 1");
    assert_eq!(answer.as_deref(), Ok("1"));

    let dir = root.path().display().to_string();
    assert!(processes_under(&dir) >= 4, "etcd and three patroni");
    tier.0.patroni_down(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(processes_under(&dir), 0);
    assert!(tier.0.patroni_pids().iter().all(|(_, p)| p.is_none()));

    // make down; make up: the same data, the database still there.
    tier.0.patroni_up().unwrap();
    let (_, members) = tier.0.patroni_status();
    assert!(
        members.last().unwrap().contains("primary: pg"),
        "{members:?}"
    );
    tier.0.patroni_down(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(processes_under(&dir), 0);
}
