//! Loopback ports and a tiny blocking HTTP probe, for waiting on the fleet's parts.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

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
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on 127.0.0.1:{port}");
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
