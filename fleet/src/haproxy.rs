//! HAProxy in front of the replicas: [`HaproxyConfig`] renders its configuration
//! (round robin, health check `GET /readyz` on each replica's admin port) and
//! [`HaProxy`] runs it in the foreground (`-db`), killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::net::wait_port;

/// One server in the backend: a replica's proxy port, health-checked on its admin port.
#[derive(Clone, Debug)]
pub struct Backend {
    pub name: String,
    pub port: u16,
    pub admin: u16,
}

/// What HAProxy is told.
#[derive(Clone, Debug)]
pub struct HaproxyConfig {
    /// The front: 127.0.0.1:`port`.
    pub port: u16,
    pub backends: Vec<Backend>,
    /// `option abortonclose`: a client that hangs up aborts its request on the replica
    /// too (without it, HAProxy waits for the replica's answer, so the gateway never
    /// sees the hang-up).
    pub abort_on_close: bool,
}

impl HaproxyConfig {
    /// The configuration for tests: fast health checks (every 200 ms, 300 ms timeout),
    /// short connect timeout, two retries with redispatch.
    pub fn render(&self) -> String {
        let servers: String = self
            .backends
            .iter()
            .map(|b| {
                format!(
                    "  server {} 127.0.0.1:{} check port {}\n",
                    b.name, b.port, b.admin
                )
            })
            .collect();
        let abort = if self.abort_on_close {
            "  option abortonclose\n"
        } else {
            ""
        };
        let port = self.port;
        format!(
            "global\n  maxconn 8000\n\
             defaults\n  mode http\n  timeout connect 500ms\n  timeout client 30s\n  \
             timeout server 30s\n  timeout check 300ms\n  retries 2\n  option redispatch\n{abort}\
             frontend front\n  bind 127.0.0.1:{port}\n  default_backend replicas\n\
             backend replicas\n  balance roundrobin\n  option httpchk GET /readyz\n  \
             http-check expect status 200\n  default-server inter 200ms fall 2 rise 2\n{servers}"
        )
    }
}

/// The `haproxy` binary: Debian's, else whatever is on PATH.
pub fn binary() -> &'static str {
    if Path::new("/usr/sbin/haproxy").exists() {
        "/usr/sbin/haproxy"
    } else {
        "haproxy"
    }
}

/// A running HAProxy.
pub struct HaProxy {
    pub port: u16,
    child: Child,
}

impl HaProxy {
    /// Writes `dir/haproxy.cfg`, starts HAProxy (log in `dir/haproxy.log`) and returns
    /// once the front listens.
    pub fn start(dir: &Path, config: &HaproxyConfig) -> Self {
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config.render()).unwrap();
        let log = std::fs::File::create(dir.join("haproxy.log")).unwrap();
        let child = Command::new(binary())
            .arg("-f")
            .arg(&path)
            .arg("-db")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("haproxy must be installed (apt-get install haproxy)");
        wait_port(config.port, Duration::from_secs(10));
        Self {
            port: config.port,
            child,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
