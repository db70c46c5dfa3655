//! A `redis-server` process for one scenario: a free loopback port, a temp dir, extra
//! arguments (persistence, `maxmemory`), and the faults the suite injects (SIGKILL,
//! restart with or without its data, commands through `redis-cli`). Killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A port nothing listens on right now (the same helper the `it` support uses).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct RedisProc {
    pub port: u16,
    dir: TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisProc {
    /// Starts a server with `extra` arguments after the defaults (no RDB snapshots,
    /// no AOF, DEBUG allowed).
    pub fn start(extra: &[&str]) -> Self {
        for _ in 0..5 {
            let mut server = Self {
                port: free_port(),
                dir: tempfile::tempdir().unwrap(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? `make test` installs it)");
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("redis.log"))
            .unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("redis-server must be on PATH (`make test` installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if self.cli(&["PING"]).trim() == "PONG" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL. Without persistence every key is gone; with `--appendonly yes` the AOF stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port (with whatever its persistence kept).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "still running");
        assert!(
            self.spawn(),
            "redis-server did not come back on port {}",
            self.port
        );
    }

    /// SIGKILL, delete any persisted data, start again empty on the same port.
    pub fn restart_empty(&mut self) {
        self.kill();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if entry.file_name() != "redis.log" {
                let p = entry.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
        self.start_again();
    }

    /// Runs one command with `redis-cli`; its output (errors included).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be on PATH");
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        s
    }

    /// One `INFO` field.
    pub fn info(&self, field: &str) -> Option<String> {
        let info = self.cli(&["INFO"]);
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| v.trim().to_string())
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.kill();
    }
}
