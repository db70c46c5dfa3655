//! How clients reach a Patroni set: multi-host URLs, HAProxy's backends, `psql` on a
//! node, and waiting for a primary at an address.

use super::*;

impl PatroniSet {
    /// `postgres://postgres@ip1:p1,ip2:p2,.../idemgate?target_session_attrs=read-write`.
    pub fn url_multi_host(&self) -> String {
        self.url_multi_host_from("")
    }

    /// [`Self::url_multi_host`] with node `first` listed first (the others in order):
    /// the host every new connection tries first, while it takes connections.
    pub fn url_multi_host_from(&self, first: &str) -> String {
        let mut nodes: Vec<&Node> = self.nodes.iter().collect();
        nodes.sort_by_key(|n| n.spec.name != first);
        let hosts: Vec<String> = (nodes.iter())
            .map(|n| n.spec.host.addr(n.spec.pg_port).to_string())
            .collect();
        format!(
            "postgres://postgres@{}/{DATABASE}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The nodes as HAProxy's servers ([`crate::haproxy_patroni_config`]).
    pub fn haproxy_backends(&self) -> Vec<crate::PgBackend> {
        (self.nodes.iter())
            .map(|n| crate::PgBackend {
                name: n.spec.name.clone(),
                ip: n.spec.host.ip,
                port: n.spec.pg_port,
                rest: n.spec.rest_port,
            })
            .collect()
    }

    /// `postgres://postgres@ADDR/idemgate` for a front (HAProxy) on `addr`.
    pub fn url_via(addr: std::net::SocketAddr) -> String {
        format!("postgres://postgres@{addr}/{DATABASE}")
    }

    /// `psql -c sql` on node `name` (tuples only, unaligned): its output or stderr.
    pub fn psql(&self, name: &str, db: &str, sql: &str) -> Result<String, String> {
        Self::psql_at(self.addrs_of(name).0, db, sql)
    }

    /// `psql -c sql` on whatever listens on `addr` (a node, or HAProxy in front).
    pub fn psql_at(addr: std::net::SocketAddr, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(crate::postgres::bindir().join("psql"))
            .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
            .args(["-U", "postgres", "-d", db, "-X", "-A", "-t", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "3")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        }
    }

    /// Until whatever listens on `addr` (HAProxy in front) reaches only a primary: three
    /// sessions in a row find `pg_is_in_recovery()` false. HAProxy starts with every
    /// server up and marks the replicas down only after their checks fail, so a fresh
    /// front may still hand a session to a replica for a second or two.
    pub fn wait_primary_at(addr: std::net::SocketAddr, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut in_a_row = 0;
        while Instant::now() < deadline {
            let r = Self::psql_at(addr, DATABASE, "SELECT pg_is_in_recovery()");
            in_a_row = if r.as_deref() == Ok("f") {
                in_a_row + 1
            } else {
                0
            };
            if in_a_row == 3 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        false
    }
}
