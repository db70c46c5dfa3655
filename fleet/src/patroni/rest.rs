//! Patroni's REST API and etcd's `/health`, over a tiny blocking HTTP/1.0 client, the
//! members of `GET /cluster` ([`Member`]), and switching synchronous replication on
//! or off for a running set ([`set_synchronous_mode`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(2);

/// `method path` with `body` (JSON) on `addr`: the status and the body, or `None` when
/// nothing answers within `timeout`.
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Option<(u16, String)> {
    let mut conn = TcpStream::connect_timeout(&addr, TIMEOUT).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(TIMEOUT)).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let status = text.get(9..12)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Some((status, body.to_string()))
}

pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    call(addr, "GET", path, "", TIMEOUT)
}

/// One member of the Patroni cluster, as `GET /cluster` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `leader`, `sync_standby`, `replica` (or `standby_leader`).
    pub role: String,
    /// `running`, `streaming`, `starting`, `stopped`, `crashed`, ...
    pub state: String,
    pub host: String,
    pub port: u16,
    pub timeline: Option<u64>,
    /// Replication lag in bytes (`None`: unknown, or the leader).
    pub lag: Option<u64>,
}

impl Member {
    pub fn is_leader(&self) -> bool {
        self.role == "leader" && self.state == "running"
    }

    /// Up and following the leader (Patroni 3.0.2 says `running` for a replica).
    pub fn is_replicating(&self) -> bool {
        self.role != "leader" && matches!(self.state.as_str(), "running" | "streaming")
    }
}

/// The members in a `GET /cluster` body.
pub fn members(body: &str) -> Option<Vec<Member>> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let list = v.get("members")?.as_array()?;
    Some(
        list.iter()
            .map(|m| Member {
                name: m["name"].as_str().unwrap_or_default().to_string(),
                role: m["role"].as_str().unwrap_or_default().to_string(),
                state: m["state"].as_str().unwrap_or_default().to_string(),
                host: m["host"].as_str().unwrap_or_default().to_string(),
                port: m["port"].as_u64().unwrap_or(0) as u16,
                timeline: m["timeline"].as_u64(),
                lag: m["lag"].as_u64(),
            })
            .collect(),
    )
}

/// `PATCH /config {"synchronous_mode": sync}` on the first of `rests` that takes it,
/// then waits until `GET /cluster` shows the change (a `sync_standby` among the members,
/// or none) and the leader runs. Patroni sets the primary's `synchronous_standby_names`
/// before it records a synchronous standby (and clears it before it drops the record);
/// Postgres reloads it a moment later.
pub fn set_synchronous_mode(
    rests: &[SocketAddr],
    sync: bool,
    within: Duration,
) -> Result<(), String> {
    let body = format!("{{\"synchronous_mode\": {sync}}}");
    let patched = (rests.iter())
        .find_map(|r| call(*r, "PATCH", "/config", &body, TIMEOUT).filter(|(s, _)| *s == 200));
    if patched.is_none() {
        return Err(format!("no Patroni node took PATCH /config {body}"));
    }
    let deadline = Instant::now() + within;
    loop {
        let m = (rests.iter())
            .find_map(|r| get(*r, "/cluster").and_then(|(_, b)| members(&b)))
            .unwrap_or_default();
        let has_sync = m.iter().any(|m| m.role == "sync_standby");
        if has_sync == sync && m.iter().any(Member::is_leader) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "synchronous_mode {sync} not in effect after {within:?}: {m:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_read_from_patronis_cluster_answer() {
        let body = r#"{"members": [
            {"name": "pg0", "role": "leader", "state": "running", "api_url": "x",
             "host": "127.0.0.1", "port": 5491, "timeline": 2},
            {"name": "pg1", "role": "sync_standby", "state": "running",
             "host": "127.0.0.1", "port": 5492, "timeline": 2, "lag": 0},
            {"name": "pg2", "role": "replica", "state": "stopped",
             "host": "127.0.0.1", "port": 5493, "lag": "unknown"}]}"#;
        let m = members(body).unwrap();
        assert_eq!(m.len(), 3);
        assert!(m[0].is_leader() && !m[0].is_replicating());
        assert!(m[1].is_replicating() && m[1].lag == Some(0));
        assert!(!m[2].is_replicating() && m[2].lag.is_none() && m[2].port == 5493);
    }
}
