//! `redis-server` on loopback: [`command`] is the one command line (no persistence,
//! loopback only) that the tests, the chaos suite and the local fleet extend;
//! [`RedisServer`] is a server on a free port in a temporary directory, killed on drop,
//! with the faults the chaos suite injects (SIGKILL, a restart with or without its data,
//! commands through `redis-cli`), optionally speaking TLS only ([`RedisTls`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::net::{free_port, Host};

/// `redis-server` on 127.0.0.1:`port` with its files in `dir`, without RDB snapshots or
/// AOF; callers append their own arguments (later ones win).
pub fn command(port: u16, dir: &Path) -> Command {
    command_on(&Host::loopback(), port, dir)
}

/// [`command`] on `host` (its namespace, its address).
pub fn command_on(host: &Host, port: u16, dir: &Path) -> Command {
    let mut cmd = host.command("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", &host.ip.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir);
    cmd
}

/// The arguments of a Redis the durable claims rely on (`postgres.claims = "vouched"`):
/// the AOF fsync'd before every reply, and nothing evicted.
pub const DURABLE_REDIS: &[&str] = &[
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--maxmemory-policy",
    "noeviction",
];

/// One field of an `INFO` text (`name:value` lines).
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Whether a server on `port` answers `PING` with `+PONG` (not `-LOADING`).
pub fn answers_ping(port: u16) -> bool {
    answers_ping_at(([127, 0, 0, 1], port).into())
}

/// [`answers_ping`] for a server at `addr`.
pub fn answers_ping_at(addr: SocketAddr) -> bool {
    let Ok(mut conn) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 5];
    conn.write_all(b"PING\r\n").is_ok() && conn.read_exact(&mut reply).is_ok() && &reply == b"+PONG"
}

/// One command through `redis-cli` on 127.0.0.1:`port` (plain TCP); its output,
/// errors included. For servers the launcher started detached (no [`RedisServer`]).
pub(crate) fn cli_at(port: u16, args: &[&str]) -> String {
    cli_addr(([127, 0, 0, 1], port).into(), args)
}

/// [`cli_at`] for a server at `addr`.
pub(crate) fn cli_addr(addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be on PATH");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

/// One `INFO` field of the server at `addr`.
pub(crate) fn info_addr(addr: SocketAddr, field: &str) -> Option<String> {
    let info = cli_addr(addr, &["INFO"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// TLS for a server: it then listens with TLS only (`--port 0 --tls-port`). PEM files.
#[derive(Debug, Clone)]
pub struct RedisTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// The CA that client certificates must chain to (and `redis-cli` trusts).
    pub ca_file: PathBuf,
    /// Refuse clients without a certificate (`--tls-auth-clients yes`).
    pub require_client_cert: bool,
    /// The certificate and key `redis-cli` presents (needed with `require_client_cert`).
    pub cli_identity: Option<(PathBuf, PathBuf)>,
}

impl RedisTls {
    fn server_args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let auth = if self.require_client_cert {
            "yes"
        } else {
            "no"
        };
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert_file),
            "--tls-key-file".into(),
            path(&self.key_file),
            "--tls-ca-cert-file".into(),
            path(&self.ca_file),
            "--tls-auth-clients".into(),
            auth.into(),
        ]
    }

    fn cli_args(&self) -> Vec<String> {
        let mut args = vec!["--tls".into(), "--cacert".into()];
        args.push(self.ca_file.display().to_string());
        if let Some((cert, key)) = &self.cli_identity {
            args.extend(["--cert".into(), cert.display().to_string()]);
            args.extend(["--key".into(), key.display().to_string()]);
        }
        args
    }
}

/// A `redis-server` of its own, on a free loopback port (or on a [`Host`] of a
/// [`crate::NetLab`]), in a temporary directory.
pub struct RedisServer {
    pub port: u16,
    /// Where it runs (loopback unless started with [`Self::start_on`]).
    pub host: Host,
    dir: TempDir,
    extra: Vec<String>,
    tls: Option<RedisTls>,
    child: Option<Child>,
    /// SIGSTOPped by [`Self::pause`] and not continued yet.
    paused: AtomicBool,
}

impl RedisServer {
    /// Starts a fresh server with no persistence.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with `extra` arguments after the defaults (no RDB snapshots, no
    /// AOF, `DEBUG` allowed).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_full(None, extra)
    }

    /// Starts a server that speaks TLS only, with `extra` arguments after the defaults.
    pub fn start_tls(tls: RedisTls, extra: &[&str]) -> Self {
        Self::start_full(Some(tls), extra)
    }

    /// Starts a server on `host` (its namespace and address) with `extra` arguments.
    pub fn start_on(host: &Host, extra: &[&str]) -> Self {
        Self::start_full_on(host, None, extra)
    }

    fn start_full(tls: Option<RedisTls>, extra: &[&str]) -> Self {
        Self::start_full_on(&Host::loopback(), tls, extra)
    }

    fn start_full_on(host: &Host, tls: Option<RedisTls>, extra: &[&str]) -> Self {
        for _ in 0..5 {
            let mut server = Self {
                port: free_port(),
                host: host.clone(),
                dir: tempfile::tempdir().unwrap(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                tls: tls.clone(),
                child: None,
                paused: AtomicBool::new(false),
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? `make test` installs it)");
    }

    /// Spawns on `self.port`; true once it answers `PING` (after loading any AOF).
    fn spawn(&mut self) -> bool {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("redis.log"))
            .unwrap();
        let child = command_on(&self.host, self.port, self.dir.path())
            .args(["--protected-mode", "no", "--enable-debug-command", "yes"])
            .args((self.tls.as_ref()).map_or_else(Vec::new, |t| t.server_args(self.port)))
            .args(&self.extra)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("redis-server must be on PATH (`make test` installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false; // exited: port taken
            }
            let ready = match self.tls {
                None => answers_ping_at(self.host.addr(self.port)),
                Some(_) => crate::net::port_open(self.port) && self.cli(&["PING"]).contains("PONG"),
            };
            if ready {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `redis://127.0.0.1:<port>` (its host's address), or `rediss://` when the server
    /// speaks TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{}:{}", self.host.ip, self.port)
    }

    /// SIGKILL. Without persistence every key is gone; with `--appendonly yes` the AOF stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A paused server dies on SIGKILL too; continued first, it is reaped at once.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            self.paused.store(false, Ordering::SeqCst);
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

    /// SIGKILL and start again on the same port (empty, unless persistence is on).
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// SIGKILL, delete any persisted data, start again empty on the same port.
    pub fn restart_empty(&mut self) {
        self.stop();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if entry.file_name() != "redis.log" {
                let p = entry.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
        self.start_again();
    }

    /// Runs one command with `redis-cli`; its output (errors included). Synchronous, so
    /// that it works while the server is paused and from outside a runtime.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-h",
                &self.host.ip.to_string(),
                "-p",
                &self.port.to_string(),
            ])
            .args((self.tls.as_ref()).map_or_else(Vec::new, RedisTls::cli_args))
            .args(args)
            .output()
            .expect("redis-cli must be on PATH");
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        s
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGSTOP: the server stops answering, its connections stay open (no RST), like a
    /// network partition seen from a client. [`Self::resume`] continues it.
    /// Until then it counts as not running ([`Self::is_running`]), and [`Self::cli`]
    /// would wait for it forever.
    pub fn pause(&self) {
        self.signal("STOP");
        self.paused.store(true, Ordering::SeqCst);
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        self.signal("CONT");
        self.paused.store(false, Ordering::SeqCst);
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            crate::gateway::signal(pid, sig);
        }
    }

    /// Whether the process is running (not stopped by [`Self::stop`], not paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some() && !self.paused.load(Ordering::SeqCst)
    }

    /// Like [`Self::cli`], with `redis-cli -c` (follows cluster redirections).
    pub fn cli_cluster(&self, args: &[&str]) -> String {
        let mut all = vec!["-c"];
        all.extend_from_slice(args);
        self.cli(&all)
    }

    /// The directory the server runs in (its log is `redis.log` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// One `INFO` field.
    pub fn info(&self, field: &str) -> Option<String> {
        info_field(&self.cli(&["INFO"]), field).map(str::to_string)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
