//! Raw HTTP/1.1 over TCP, for the tests of limits and timeouts: a response read by hand,
//! a client that does not read (a connection with a small receive buffer, and an upstream
//! whose answers are larger than the kernel buffers for it), and reading until the
//! server closes the connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpSocket, TcpStream};

/// Reads one response head and its `Content-Length` body; the status and body length.
pub async fn read_response(stream: &mut TcpStream) -> std::io::Result<(u16, usize)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let len: usize = (head.lines())
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = buf.len() - head_end;
    while body < len {
        match stream.read(&mut chunk).await? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => body += n,
        }
    }
    Ok((status, body))
}

/// Larger than what the kernel buffers for a client that does not read.
pub const BIG: usize = 6 << 20;

/// An upstream that answers every request with `BIG` bytes; counts its executions.
pub async fn big_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let executions = Arc::new(AtomicUsize::new(0));
    let counted = executions.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            (
                [("content-type", "application/octet-stream")],
                vec![b'r'; BIG],
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, executions)
}

/// A connection with a small receive buffer, so that the response stays in the server.
pub async fn connect_small(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 << 10).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Reads `stream` until the peer closes it (or an error), for at most `within`: the
/// bytes read, and whether it closed in time.
pub async fn read_until_closed(
    stream: &mut (impl AsyncRead + Unpin),
    within: Duration,
) -> (usize, bool) {
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let ended = tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    (got, ended.is_ok())
}

/// Whether the peer closes `stream` (or it fails) within `within`; what it sends is dropped.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> bool {
    let mut sink = [0u8; 1024];
    let closed = async { while !matches!(stream.read(&mut sink).await, Ok(0) | Err(_)) {} };
    tokio::time::timeout(within, closed).await.is_ok()
}
