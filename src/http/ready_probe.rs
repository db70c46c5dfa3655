//! The client side of `/readyz`, for `idemgate health`: one GET to the admin listener
//! with a deadline, so a container `HEALTHCHECK` or an exec probe needs no shell or curl.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

/// What the admin listener answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// 200: this replica can serve keyed requests.
    Ready { body: String },
    /// Any other status (503 while a store it needs is down), with the JSON body that says why.
    NotReady { status: StatusCode, body: String },
}

/// Why `/readyz` could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("no answer from http://{addr}/readyz within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    #[error("cannot connect to the admin listener at {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("asking http://{addr}/readyz: {source}")]
    Http {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
}

/// The address to dial for a listener bound to `listen`: an unspecified address
/// (`0.0.0.0`, `[::]`, as in a container) is reached on the loopback of the same family.
pub fn dial_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// Asks `GET /readyz` on the admin listener bound to `admin_listen`; the whole
/// exchange (connect, request, body) must finish within `timeout`. Blocking: runs its
/// own single-threaded runtime, for the command line only.
pub fn check(admin_listen: SocketAddr, timeout: Duration) -> Result<Readiness, ProbeError> {
    let addr = dial_address(admin_listen);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ProbeError::Runtime)?;
    runtime.block_on(async {
        tokio::time::timeout(timeout, ask(addr))
            .await
            .unwrap_or(Err(ProbeError::Timeout { addr, timeout }))
    })
}

async fn ask(addr: SocketAddr) -> Result<Readiness, ProbeError> {
    let http = |source| ProbeError::Http { addr, source };
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| ProbeError::Connect { addr, source })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    tokio::spawn(conn);
    let request = Request::get("/readyz")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .expect("a static request is valid");
    let response = sender.send_request(request).await.map_err(http)?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(http)?;
    let body = String::from_utf8_lossy(&body.to_bytes()).into_owned();
    Ok(if status == StatusCode::OK {
        Readiness::Ready { body }
    } else {
        Readiness::NotReady { status, body }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listen_addresses_are_dialled_on_loopback() {
        let dial = |s: &str| dial_address(s.parse().unwrap()).to_string();
        assert_eq!(dial("0.0.0.0:9090"), "127.0.0.1:9090");
        assert_eq!(dial("[::]:9090"), "[::1]:9090");
        assert_eq!(dial("10.1.2.3:9090"), "10.1.2.3:9090");
    }

    #[test]
    fn a_listener_that_never_answers_times_out() {
        // Accepts (the kernel does, from the backlog) but never replies.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let err = check(addr, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, ProbeError::Timeout { .. }), "{err}");
    }
}
