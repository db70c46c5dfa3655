//! Where a part runs ([`Host`]: loopback, or a network namespace of a [`crate::NetLab`]),
//! loopback ports and a tiny blocking HTTP probe, for waiting on the fleet's parts.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where a part runs: on this machine's loopback ([`Host::loopback`], what every part
/// does unless told otherwise), or in a network namespace of its own with a private
/// address on a [`crate::NetLab`]'s bridge. Parts listen on [`Host::ip`] and are
/// started through [`Host::command`]; the test process reaches them from the root
/// namespace through the lab's bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// A short name (`redis0`, `gw1`, ...), for logs and [`crate::NetLab`]'s cuts.
    pub name: String,
    pub ip: Ipv4Addr,
    /// The network namespace (`None`: the root namespace, on loopback).
    pub netns: Option<String>,
}

impl Host {
    /// 127.0.0.1 in the root namespace.
    pub fn loopback() -> Self {
        Self {
            name: "loopback".into(),
            ip: Ipv4Addr::LOCALHOST,
            netns: None,
        }
    }

    /// `program` run in this host's namespace (`ip netns exec NS program`, which execs
    /// it: the child's pid is the program's), or as is on loopback.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(program);
                cmd
            }
        }
    }

    pub fn addr(&self, port: u16) -> SocketAddr {
        (self.ip, port).into()
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_ok()
}

/// Waits until something listens on 127.0.0.1:`port`; panics after `within`.
pub fn wait_port(port: u16, within: Duration) {
    wait_addr(([127, 0, 0, 1], port).into(), within);
}

/// Waits until something listens on `addr`; panics after `within`.
pub fn wait_addr(addr: SocketAddr, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on {addr}");
}

/// The status of `GET path` on 127.0.0.1:`port` (HTTP/1.0, one connection), or `None`
/// when nothing answers within `timeout`.
pub fn http_status(port: u16, path: &str, timeout: Duration) -> Option<u16> {
    let mut conn = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    conn.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).ok()?;
    // "HTTP/1.x NNN"
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
