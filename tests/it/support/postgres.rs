//! A real PostgreSQL server per test: `initdb` into a temp dir and `postgres` on a free
//! loopback port, run as the unprivileged `postgres` account when the tests run as
//! root (Postgres refuses root). `fsync=off`: these are tests. Killed on drop.

use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub struct PgServer {
    pub port: u16,
    dir: TempDir,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    child: Option<Child>,
}

/// Where `initdb` and `postgres` live (Debian keeps them off PATH).
fn bindir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .filter(|d| d.join("initdb").exists())
        .expect("PostgreSQL server binaries not found (`make test` installs postgresql-15)")
}

/// uid and gid of the `postgres` account, when running as root.
fn owner() -> Option<(u32, u32)> {
    let uid = String::from_utf8(Command::new("id").arg("-u").output().ok()?.stdout).ok()?;
    if uid.trim() != "0" {
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((
        id("-u").expect("a `postgres` account (from the postgresql package)"),
        id("-g")?,
    ))
}

impl PgServer {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let owner = owner();
        if let Some((uid, gid)) = owner {
            chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let mut server = Self {
            port: 0,
            dir,
            bin: bindir(),
            owner,
            child: None,
        };
        let status = server
            .command("initdb")
            .arg("-D")
            .arg(server.data())
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "initdb failed");
        for _ in 0..5 {
            server.port = super::redis::free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "postgres did not start; see {}",
            server.dir.path().join("pg.log").display()
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("pg.log")).unwrap();
        if let Some((uid, gid)) = self.owner {
            chown(self.dir.path().join("pg.log"), Some(uid), Some(gid)).unwrap();
        }
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data())
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if ready(self.dir.path(), self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A gateway's `[postgres]` section for this server (1 s statement timeout), with
    /// `extra` lines in it.
    pub fn section(&self, extra: &str) -> String {
        format!(
            "[postgres]\nurl = \"{}\"\nstatement_timeout = \"1s\"\n{extra}\n",
            self.url()
        )
    }

    /// Stops the server (fast shutdown); the data directory stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same data.
    pub fn restart(&mut self) {
        self.stop();
        assert!(self.spawn(), "postgres did not come back");
    }

    /// A client for inspecting the database from a test.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
    }

    /// Rows in the records table.
    pub async fn count(&self, filter: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM idemgate_records WHERE {filter}");
        self.client()
            .await
            .query_one(&sql, &[])
            .await
            .unwrap()
            .get(0)
    }
}

/// Accepting connections: pg_isready-like check over TCP.
fn ready(_dir: &Path, port: u16) -> bool {
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=1");
    // Its own thread and runtime: this is called from inside the test's runtime.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .is_ok()
        })
    })
    .join()
    .unwrap_or(false)
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
