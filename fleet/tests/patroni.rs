//! The Patroni launcher starts what it says: a leader, a synchronous standby and a
//! replica, a database, a failover after host loss within the leader key's TTL, the
//! old primary back as a replica, a planned switchover, and nothing left running after
//! the drop; and a running set switched between synchronous and asynchronous
//! replication (as `make bench` does between its Patroni rows).

use std::time::{Duration, Instant};

use idemgate_fleet::{
    free_port, haproxy_patroni_config, HaProxy, Host, PatroniOptions, PatroniSet, Replication,
    PATRONI_DATABASE, PATRONI_TTL,
};

/// Whether HAProxy's front reaches only a primary within `within`.
fn front_reaches_primary(front: std::net::SocketAddr, within: Duration) -> bool {
    PatroniSet::wait_primary_at(front, within)
}

/// Processes whose command line mentions `dir` (patroni's config, postgres' `-D`).
fn processes_under(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(dir) {
            found.push(cmd);
        }
    }
    found
}

#[test]
fn patroni_fails_over_rejoins_and_switches_over() {
    let mut set = PatroniSet::start(PatroniOptions::default());
    let dir = set.dir().display().to_string();
    let members = set.members();
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(
        members.iter().any(|m| m.role == "sync_standby"),
        "{members:?}"
    );
    let first = set.primary().unwrap();
    assert_eq!(
        set.psql(&first, PATRONI_DATABASE, "SELECT current_database()")
            .as_deref(),
        Ok(PATRONI_DATABASE)
    );
    assert!(set
        .url_multi_host()
        .ends_with("/idemgate?target_session_attrs=read-write"));
    let port = free_port();
    let text = haproxy_patroni_config(([127, 0, 0, 1], port).into(), &set.haproxy_backends());
    let lb = HaProxy::start_text(set.dir(), "pg-haproxy", &Host::loopback(), port, &text);
    let front = ([127, 0, 0, 1], port).into();
    assert!(front_reaches_primary(front, Duration::from_secs(10)));

    let killed = Instant::now();
    assert_eq!(set.kill_primary(), first);
    let second = set
        .wait_new_primary(&first, Duration::from_secs(PATRONI_TTL + 20))
        .expect("a new primary");
    let took = killed.elapsed();
    println!("failover after host loss: {took:?}");
    assert!(took < Duration::from_secs(PATRONI_TTL + 10), "{took:?}");
    assert!(
        front_reaches_primary(front, Duration::from_secs(10)),
        "HAProxy follows"
    );

    set.restart_node(&first);
    assert!(
        set.wait_replicas(Duration::from_secs(60)),
        "{:?}",
        set.members()
    );
    let switched = Instant::now();
    let third = set.switchover();
    println!("switchover: {:?} ({second} -> {third})", switched.elapsed());
    assert_ne!(third, second);
    assert!(front_reaches_primary(front, Duration::from_secs(10)));

    assert!(!processes_under(&dir).is_empty());
    drop(lb);
    drop(set);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(processes_under(&dir), Vec::<String>::new());
}

/// The primary's `SHOW name`.
fn show(set: &PatroniSet, name: &str) -> String {
    let primary = set.primary().expect("a primary");
    set.psql(&primary, "postgres", &format!("SHOW {name}"))
        .unwrap_or_else(|e| panic!("SHOW {name} on {primary}: {e}"))
}

/// Whether the primary's `synchronous_standby_names` is set (`sync`) or empty within 5 s
/// (Postgres reloads its configuration a moment after Patroni writes it).
fn standby_names_set(set: &PatroniSet, sync: bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if show(set, "synchronous_standby_names").is_empty() != sync {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn replication_switches_between_synchronous_and_asynchronous_with_fsync_on() {
    let mut set = PatroniSet::start(PatroniOptions {
        fsync: true,
        ..PatroniOptions::default()
    });
    assert_eq!(show(&set, "fsync"), "on");
    assert!(standby_names_set(&set, true));

    set.set_replication(Replication::Async).unwrap();
    assert_eq!(set.replication, Replication::Async);
    let members = set.members();
    assert!(
        !members.iter().any(|m| m.role == "sync_standby"),
        "{members:?}"
    );
    assert!(standby_names_set(&set, false));

    set.set_replication(Replication::Sync).unwrap();
    let members = set.members();
    assert!(
        members.iter().any(|m| m.role == "sync_standby"),
        "{members:?}"
    );
    assert!(standby_names_set(&set, true));
}
