//! PostgreSQL on loopback: where the server binaries live ([`bindir`]), which account
//! runs them ([`postgres_owner`]: Postgres refuses root, so under root it runs as the
//! unprivileged `postgres` account), and [`PgServer`], a cluster of its own (`initdb`
//! into a temporary directory, `postgres` on a free port, `fsync=off`), killed on drop,
//! optionally with TLS on ([`PgTls`]: `ssl = on`, and `hostssl`-only access if asked).

use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::net::{free_port, Host};

/// Where `initdb` and `postgres` live (Debian keeps them off PATH): `pg_config
/// --bindir`, else the newest `/usr/lib/postgresql/*/bin`.
pub fn bindir() -> PathBuf {
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

/// uid and gid of the `postgres` account when running as root (`None` otherwise).
pub fn postgres_owner() -> Option<(u32, u32)> {
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

/// `bin/program` run as `owner` (if any), from `/`, which that account can always enter.
pub fn pg_command(bin: &Path, program: &str, owner: Option<(u32, u32)>) -> Command {
    pg_command_on(&Host::loopback(), bin, program, owner)
}

/// [`pg_command`] on `host`: in a namespace, `ip netns exec` (as root) then `setpriv`
/// to the account, each exec'ing the next, so the child is the program itself.
pub(crate) fn pg_command_on(
    host: &Host,
    bin: &Path,
    program: &str,
    owner: Option<(u32, u32)>,
) -> Command {
    let mut cmd = match (&host.netns, owner) {
        (Some(_), Some((uid, gid))) => {
            let mut cmd = host.command("setpriv");
            cmd.args([format!("--reuid={uid}"), format!("--regid={gid}")])
                .args(["--clear-groups", "--"])
                .arg(bin.join(program));
            cmd
        }
        (Some(_), None) => host.command(bin.join(program)),
        (None, _) => {
            let mut cmd = Command::new(bin.join(program));
            if let Some((uid, gid)) = owner {
                cmd.uid(uid).gid(gid);
            }
            cmd
        }
    };
    if owner.is_some() {
        cmd.current_dir("/");
    }
    cmd
}

/// Whether the server on 127.0.0.1:`port` accepts connections (`pg_isready`).
pub fn accepting(bin: &Path, port: u16) -> bool {
    accepting_at(bin, &Host::loopback(), port)
}

fn accepting_at(bin: &Path, host: &Host, port: u16) -> bool {
    Command::new(bin.join("pg_isready"))
        .args([
            "-q",
            "-h",
            &host.ip.to_string(),
            "-p",
            &port.to_string(),
            "-t",
            "1",
        ])
        .args(["-U", "postgres", "-d", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The /16 of a lab host's address (`10.213.0.0`).
fn lab_range(host: &Host) -> std::net::Ipv4Addr {
    let [a, b, ..] = host.ip.octets();
    std::net::Ipv4Addr::new(a, b, 0, 0)
}

/// TLS for a server (PEM files; copied into the cluster, owned by its account).
#[derive(Debug, Clone)]
pub struct PgTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Only TLS sessions are let in (`pg_hba.conf` with `hostssl` lines only).
    pub hostssl_only: bool,
}

/// A PostgreSQL cluster of its own on a free loopback port (or on a [`Host`]).
pub struct PgServer {
    pub port: u16,
    pub host: Host,
    dir: TempDir,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    /// `-c` settings beyond the defaults (TLS).
    settings: Vec<String>,
    child: Option<Child>,
}

impl PgServer {
    pub fn start() -> Self {
        Self::start_full(&Host::loopback(), None, &[])
    }

    /// A server that keeps its commits as production's does (`fsync`,
    /// `synchronous_commit` and full-page writes on): for measuring what a commit costs.
    pub fn start_durable() -> Self {
        let keep = ["fsync=on", "synchronous_commit=on", "full_page_writes=on"];
        Self::start_full(&Host::loopback(), None, &keep)
    }

    /// A server on `host` (its namespace, listening on its address).
    pub fn start_on(host: &Host) -> Self {
        Self::start_full(host, None, &[])
    }

    /// A server with `ssl = on` and the given certificate.
    pub fn start_tls(tls: PgTls) -> Self {
        Self::start_full(&Host::loopback(), Some(tls), &[])
    }

    /// `settings` are `-c` settings after the test defaults, so they win.
    fn start_full(host: &Host, tls: Option<PgTls>, settings: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let owner = postgres_owner();
        if let Some((uid, gid)) = owner {
            chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let mut server = Self {
            port: 0,
            host: host.clone(),
            dir,
            bin: bindir(),
            owner,
            settings: Vec::new(),
            child: None,
        };
        let status = pg_command(&server.bin, "initdb", owner)
            .arg("-D")
            .arg(server.data())
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "initdb failed");
        if host.netns.is_some() {
            // The lab's parts connect from their own addresses on the bridge.
            let hba = server.data().join("pg_hba.conf");
            let mut lines = std::fs::read_to_string(&hba).unwrap();
            lines.push_str(&format!("host all all {}/16 trust\n", lab_range(host)));
            std::fs::write(&hba, lines).unwrap();
        }
        if let Some(tls) = tls {
            server.enable_tls(&tls);
        }
        for setting in settings {
            server.set(setting);
        }
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "postgres did not start; see {}",
            server.dir.path().join("pg.log").display()
        );
    }

    /// Copies the certificate and key in (the key readable by its owner only) and
    /// turns `ssl` on; with `hostssl_only`, plaintext TCP sessions are refused.
    fn enable_tls(&mut self, tls: &PgTls) {
        use std::os::unix::fs::PermissionsExt;
        let data = self.data();
        for (from, name) in [
            (&tls.cert_file, "server.crt"),
            (&tls.key_file, "server.key"),
        ] {
            let to = data.join(name);
            std::fs::copy(from, &to).unwrap();
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
            if let Some((uid, gid)) = self.owner {
                chown(&to, Some(uid), Some(gid)).unwrap();
            }
        }
        if tls.hostssl_only {
            let hba = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
            std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
        }
        for setting in [
            "ssl=on",
            "ssl_cert_file=server.crt",
            "ssl_key_file=server.key",
        ] {
            self.set(setting);
        }
    }

    /// Adds a `-c` setting to the server's command line (after the test defaults, so it
    /// wins).
    fn set(&mut self, setting: &str) {
        self.settings
            .extend(["-c".to_string(), setting.to_string()]);
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("pg.log")).unwrap();
        if let Some((uid, gid)) = self.owner {
            chown(self.dir.path().join("pg.log"), Some(uid), Some(gid)).unwrap();
        }
        let child = pg_command_on(&self.host, &self.bin, "postgres", self.owner)
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string()])
            .arg("-c")
            .arg(format!("listen_addresses={}", self.host.ip))
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off"])
            .args(&self.settings)
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
            if accepting_at(&self.bin, &self.host, self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@{}:{}/postgres",
            self.host.ip, self.port
        )
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
        self.stop_with("-INT", Duration::from_secs(10));
    }

    /// Sends `signal` to the postmaster, waits up to `within` for it to exit, then
    /// SIGKILLs it.
    fn stop_with(&mut self, signal: &str, within: Duration) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
            let deadline = Instant::now() + within;
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
}

impl Drop for PgServer {
    /// Immediate shutdown (SIGQUIT), SIGKILL only if that takes over 5 s. Unlike
    /// SIGKILL, it removes the server's SysV shared memory segment. The kernel keeps
    /// 4096 (`kernel.shmmni`), and a machine that had SIGKILLed that many servers
    /// started no more: `initdb` failed.
    fn drop(&mut self) {
        self.stop_with("-QUIT", Duration::from_secs(5));
    }
}
