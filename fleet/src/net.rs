//! Where a part runs ([`Host`]: loopback, or a network namespace of a [`crate::NetLab`]),
//! loopback ports and a tiny blocking HTTP probe, for waiting on the fleet's parts.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
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

/// A port nothing listens on right now, never handed out twice by this process.
///
/// Taken below the kernel's ephemeral range where that leaves room (10000-19999, with
/// port + 10000, a Redis Cluster node's bus, free too): a port picked from the ephemeral
/// range can be taken as the source port of any outgoing connection before its server
/// binds it, which with many tests in parallel made a gateway fail to start now and then.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if ephemeral_low() < 30_000 {
        return kernel_port();
    }
    let start = std::process::id().wrapping_mul(7919);
    let bindable = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    for _ in 0..10_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (start.wrapping_add(n) % 10_000) as u16;
        if bindable(port) && bindable(port + 10_000) {
            return port;
        }
    }
    kernel_port()
}

/// The low end of the kernel's ephemeral port range (Linux' default when unreadable).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port the kernel picks from its ephemeral range.
fn kernel_port() -> u16 {
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
