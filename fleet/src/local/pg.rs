//! The local fleet's PostgreSQL cluster, placed as `deploy/local/lib.sh` and `up.sh`
//! place it: data in `.state/pg`, or, when root runs the fleet from a checkout the
//! `postgres` account cannot reach (a private home, a `mktemp -d` parent), in a
//! directory under /var/tmp named in `.state/pg.home`. Started and stopped with
//! `pg_ctl`, as the `postgres` account under root; the data is kept across `down`.

use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::postgres::{pg_command, postgres_owner};

/// The Postgres 15 binaries `make up` installs (the version of an existing `.state/pg`).
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Cluster {
    /// Where the cluster (`pg/`) and its server log (`postgres.log`) live.
    pub home: PathBuf,
    pub owner: Option<(u32, u32)>,
    bin: PathBuf,
}

impl Cluster {
    /// The cluster of `state` (following `state/pg.home` if present).
    pub fn of(state: &Path) -> Self {
        let home = std::fs::read_to_string(state.join("pg.home"))
            .map(|s| PathBuf::from(s.trim()))
            .unwrap_or_else(|_| state.to_path_buf());
        Self {
            home,
            owner: postgres_owner(),
            bin: PathBuf::from(PG_BIN),
        }
    }

    pub fn data(&self) -> PathBuf {
        self.home.join("pg")
    }

    pub fn log(&self) -> PathBuf {
        self.home.join("postgres.log")
    }

    fn pg(&self, program: &str) -> Command {
        pg_command(&self.bin, program, self.owner)
    }

    pub fn initialized(&self) -> bool {
        self.data().join("PG_VERSION").exists()
    }

    /// A live postmaster serves the cluster (`pg_ctl status`).
    pub fn running(&self) -> bool {
        self.initialized()
            && (self.pg("pg_ctl").arg("status").arg("-D").arg(self.data()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    }

    /// Under root, moves a cluster not yet created out of a `state` the `postgres`
    /// account cannot enter, into a fresh /var/tmp/idemgate-pg.* named in pg.home.
    pub fn place(&mut self, state: &Path) -> Result<(), String> {
        if self.initialized() || self.owner.is_none() || self.home != state {
            return Ok(());
        }
        let reachable = (self.pg("test").arg("-x").arg(state))
            .status()
            .is_ok_and(|s| s.success());
        if reachable {
            return Ok(());
        }
        let out = Command::new("mktemp")
            .args(["-d", "/var/tmp/idemgate-pg.XXXXXX"])
            .output()
            .map_err(|e| format!("mktemp: {e}"))?;
        let home = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let (uid, gid) = self.owner.unwrap();
        chown(&home, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", home.display()))?;
        std::fs::write(state.join("pg.home"), format!("{}\n", home.display()))
            .map_err(|e| e.to_string())?;
        println!(
            "==> the postgres account cannot reach {} (a parent directory is private); the cluster goes to {}",
            state.display(),
            home.display()
        );
        self.home = home;
        Ok(())
    }

    /// `initdb` on first run (log appended to `initdb_log`).
    pub fn init(&self, initdb_log: &Path) -> Result<(), String> {
        let data = self.data();
        if self.initialized() {
            return Ok(());
        }
        if std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()) {
            return Err(format!(
                "{} exists but holds no Postgres cluster; remove it to let make up initdb afresh",
                data.display()
            ));
        }
        println!("==> initdb {} (first run)", data.display());
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        if let Some((uid, gid)) = self.owner {
            chown(&data, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        }
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(initdb_log)
            .map_err(|e| e.to_string())?;
        let ok = (self.pg("initdb").arg("-D").arg(&data))
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(())
            .ok_or_else(|| format!("initdb failed (log: {})", initdb_log.display()))
    }

    /// `pg_ctl start` on 127.0.0.1:`port`, TCP only (no Unix socket: its path could
    /// exceed the 107-byte limit), waiting up to `timeout_s` seconds.
    pub fn start(&self, port: u16, timeout_s: u64) -> Result<(), String> {
        let log = self.log();
        if !log.exists() {
            std::fs::write(&log, "").map_err(|e| e.to_string())?;
        }
        if let Some((uid, gid)) = self.owner {
            chown(&log, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        }
        let opts =
            format!("-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''");
        let ok = (self.pg("pg_ctl").arg("start").arg("-D").arg(self.data()))
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", &timeout_s.to_string(), "-s", "-o", &opts])
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(())
            .ok_or_else(|| format!("postgres did not start (log: {})", log.display()))
    }

    /// `pg_ctl stop -m fast`, then `-m immediate` if that did not do within `grace_s`.
    pub fn stop(&self, grace_s: u64) {
        let stop = |mode: &str| {
            (self.pg("pg_ctl").arg("stop").arg("-D").arg(self.data()))
                .args(["-m", mode, "-w", "-t", &grace_s.to_string(), "-s"])
                .status()
                .is_ok_and(|s| s.success())
        };
        println!("==> stopping postgres (pg_ctl stop -m fast)");
        if !stop("fast") && self.running() {
            eprintln!("warning: postgres did not stop within {grace_s}s; pg_ctl stop -m immediate");
            stop("immediate");
        }
    }

    pub fn accepting(&self, port: u16) -> bool {
        crate::postgres::accepting(&self.bin, port)
    }
}
