//! The bench's Redis, run as `postgres.claims = "vouched"` relies on it
//! ([`crate::DURABLE_REDIS`]: the AOF fsync'd before every reply, `noeviction`) and
//! with one replica, so that a vouched claim can be kept by Redis (a replica
//! acknowledges it, `WAIT 1`) and every row pays what such a Redis costs:
//!
//! - `redis` on [`ports::REDIS`]: every per-slot warmth marker two days in the past,
//!   written by this server process ([`warm::backdate_two_days`]), 4.3 M expiring filler
//!   keys ([`warm::fill`]), then its AOF rewritten (`BGREWRITEAOF`): the rows start on
//!   a compact AOF, as a Redis that has run a while does, not in the middle of a rewrite;
//! - `redis-replica` on [`ports::REDIS_REPLICA`]: the same arguments plus `--replicaof`,
//!   started after the fill, so that its first full synchronisation gives it the
//!   primary's whole data set (the markers' proof of origin stays the primary's: an
//!   `APPEND` neither replicated nor persisted). Ready once the primary counts it
//!   (`connected_slaves:1`), its link is up (`master_link_status:up`), both hold as many
//!   keys at the same replication offset, and neither forks any more (the sync's
//!   snapshot, the AOF rewrite a replica starts after loading one).
//!
//! Each starts in an emptied directory (`.state/bench/redis`, `.state/bench/redis-replica`):
//! with the AOF on, a directory kept from an earlier run would load that run's keys.
//! `bench stop redis` stops the replica too ([`is_part`]).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{ports, warm, Bench, Res};
use crate::net::port_open;
use crate::redis::{
    answers_ping, cli_at, command as redis_command, info_field as field, DURABLE_REDIS,
};

/// The replica's part name.
pub const REPLICA: &str = "redis-replica";

/// How long the replica may take to copy, load and rewrite the primary's data set.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(240);

/// Whether part `name` is the bench's Redis or its replica (`redis` names both).
pub fn is_part(name: &str) -> bool {
    name == "redis" || name == REPLICA
}

/// The command line of a replica on `port`: [`DURABLE_REDIS`] and `--replicaof` the
/// primary on `primary`.
fn replica_command(dir: &std::path::Path, port: u16, primary: u16) -> Command {
    let mut cmd = redis_command(port, dir);
    cmd.args(DURABLE_REDIS)
        .args(["--replicaof", "127.0.0.1", &primary.to_string()])
        .args(["--daemonize", "no"]);
    cmd
}

/// Why the server whose `INFO` this is still works in the background (a fork for a
/// snapshot or an AOF rewrite, a data set loading), if it does.
fn busy(info: &str) -> Option<&'static str> {
    let on = |name: &str| field(info, name).is_some_and(|v| v != "0");
    [
        ("loading", "loading"),
        ("rdb_bgsave_in_progress", "snapshotting"),
        ("aof_rewrite_in_progress", "rewriting its AOF"),
        ("aof_rewrite_scheduled", "about to rewrite its AOF"),
        ("master_sync_in_progress", "synchronising"),
    ]
    .into_iter()
    .find_map(|(f, what)| on(f).then_some(what))
}

/// `Ok` once the primary on port `p` and its replica on port `r` hold the same data
/// and rest; else what is missing.
pub fn replicated(p: u16, r: u16) -> Result<(), String> {
    let (primary, replica) = (cli_at(p, &["INFO"]), cli_at(r, &["INFO"]));
    if field(&primary, "connected_slaves") != Some("1") {
        return Err("the primary counts no replica (connected_slaves)".into());
    }
    if field(&replica, "master_link_status") != Some("up") {
        return Err("the replica's link is not up (master_link_status)".into());
    }
    if let Some(what) = busy(&primary).or(busy(&replica)) {
        return Err(format!("a server is still {what}"));
    }
    let (offset, copied) = (
        field(&primary, "master_repl_offset"),
        field(&replica, "slave_repl_offset"),
    );
    let keys = (cli_at(p, &["DBSIZE"]), cli_at(r, &["DBSIZE"]));
    if offset != copied || keys.0.trim() != keys.1.trim() {
        return Err(format!(
            "offsets {offset:?} / {copied:?}, keys {} / {}",
            keys.0.trim(),
            keys.1.trim()
        ));
    }
    Ok(())
}

/// Polls `check` every 100 ms until it is `Ok`; after `timeout`, its last complaint.
pub fn wait_for(what: &str, timeout: Duration, check: impl Fn() -> Result<(), String>) -> Res {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(()) => return Ok(()),
            Err(why) if Instant::now() >= deadline => {
                return Err(format!("{what}: not after {timeout:?} ({why})"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

impl Bench {
    /// The primary, warm and filled, then its replica, in sync; refused (nothing
    /// touched) while either runs; both stopped again if a step fails.
    pub fn start_redis(&self) -> Res {
        if let Some((name, pid)) = self.running().into_iter().find(|(n, _)| is_part(n)) {
            return Err(format!(
                "{name} is already running (pid {pid}); stop redis first"
            ));
        }
        let both = ["redis".to_string()];
        self.start_primary()
            .and_then(|()| self.start_replica())
            .inspect_err(|_| self.stop(&both))
    }

    /// An emptied `NAME` directory in this fleet's state (`.state/bench/NAME`).
    pub(super) fn fresh_dir(&self, name: &str) -> Result<PathBuf, String> {
        let dir = self.state.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(dir)
    }

    /// The primary with every per-slot warmth marker backdated two days (see [`warm`])
    /// and the filler keys, its AOF rewritten after them.
    fn start_primary(&self) -> Res {
        let dir = self.fresh_dir("redis")?;
        let mut cmd = redis_command(ports::REDIS, &dir);
        cmd.args(DURABLE_REDIS).args(["--daemonize", "no"]);
        self.start("redis", &[ports::REDIS], &mut cmd, || {
            answers_ping(ports::REDIS)
        })?;
        self.rewarm()?;
        warm::fill(ports::REDIS, warm::FILLER_KEYS)?;
        let resting = || busy(&cli_at(ports::REDIS, &["INFO"])).map_or(Ok(()), |w| Err(w.into()));
        wait_for("redis at rest after the fill", SYNC_TIMEOUT, resting)?;
        let reply = cli_at(ports::REDIS, &["BGREWRITEAOF"]);
        if !reply.contains("Background append only file rewriting") {
            return Err(format!("redis: BGREWRITEAOF refused: {}", reply.trim()));
        }
        wait_for("redis' AOF rewritten", SYNC_TIMEOUT, resting)
    }

    /// Every per-slot warmth marker of the primary two days old again, as this server
    /// process' own (`bench rewarm`): after the last release's rows, whose claim script
    /// rewrites a marker of this tree's format as new (in its own), which would leave the
    /// later rows' slots cold.
    pub fn rewarm(&self) -> Res {
        warm::backdate_two_days(ports::REDIS)
    }

    /// The replica, waited for until it holds the primary's data set.
    fn start_replica(&self) -> Res {
        self.start_replica_on(ports::REDIS, ports::REDIS_REPLICA)
    }

    /// A replica ([`REPLICA`]) on `port` of the primary on `primary`, waited for until it
    /// holds the primary's data set (also the soak's).
    pub(super) fn start_replica_on(&self, primary: u16, port: u16) -> Res {
        let mut cmd = replica_command(&self.fresh_dir(REPLICA)?, port, primary);
        // It answers `-LOADING` while it loads the primary's snapshot: up once it listens.
        self.start(REPLICA, &[port], &mut cmd, || port_open(port))?;
        let in_sync = || replicated(primary, port);
        wait_for("redis replica in sync", SYNC_TIMEOUT, in_sync)
            .map_err(|e| format!("{e}; see {}", self.log(REPLICA).display()))?;
        eprintln!(
            "==> redis replica in sync on {port} ({} keys)",
            cli_at(port, &["DBSIZE"]).trim()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_names_the_primary_and_its_replica() {
        assert!(is_part("redis") && is_part(REPLICA));
        assert!(!is_part("redis-shard-1") && !is_part("gw-1"));
        assert_eq!(super::super::program(REPLICA), "redis-server");
    }

    #[test]
    fn the_replica_runs_durable_and_follows_the_primary() {
        let cmd = replica_command(
            std::path::Path::new("/tmp/x"),
            ports::REDIS_REPLICA,
            ports::REDIS,
        );
        let args: Vec<String> = (cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        assert!(line.contains(&DURABLE_REDIS.join(" ")), "{line}");
        assert!(line.contains("--replicaof 127.0.0.1 16390"), "{line}");
        assert!(line.contains(&format!("--port {}", ports::REDIS_REPLICA)));
    }

    #[test]
    fn info_fields_and_background_work_are_read() {
        let info = "# Persistence\r\nloading:0\r\naof_rewrite_in_progress:1\r\n\
                    aof_rewrite_scheduled:0\r\nconnected_slaves:1\r\n";
        assert_eq!(field(info, "connected_slaves"), Some("1"));
        assert_eq!(field(info, "connected"), None);
        assert_eq!(busy(info), Some("rewriting its AOF"));
        assert_eq!(busy("loading:0\r\nrdb_bgsave_in_progress:0\r\n"), None);
    }
}
