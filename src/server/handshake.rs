//! The TLS handshake of a proxy connection (`[server.tls]`), within
//! `server.header_read_timeout`: a client that opens a connection and never finishes
//! its handshake (or never sends a ClientHello at all) is dropped then, as a client that
//! never sends its request head is, and gives back its `max_connections` slot. ALPN says
//! which protocol follows: `h2` is served as HTTP/2, `http/1.1` or none as HTTP/1.1.
//!
//! hyper's HTTP/2 server waits for the client's connection preface with no timeout of
//! its own, so after an `h2` handshake the preface must also arrive by the same
//! deadline ([`Preface`]); on HTTP/1.1, hyper's header-read timeout takes over.

use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::layers::write_timeout::WriteTimeout;
use super::preface::Preface;

/// A TLS connection after its handshake, and whether ALPN chose HTTP/2.
pub(super) struct Accepted {
    pub io: Preface<TlsStream<WriteTimeout>>,
    pub h2: bool,
}

/// The handshake on `io`, by `deadline`; `None` when it failed or took too long (the
/// connection is then dropped).
pub(super) async fn accept(
    acceptor: &TlsAcceptor,
    io: WriteTimeout,
    deadline: Instant,
) -> Option<Accepted> {
    let stream = match tokio::time::timeout_at(deadline, acceptor.accept(io)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!("TLS handshake not done within server.header_read_timeout; closing");
            return None;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = match h2 {
        true => Preface::expected(stream, deadline),
        false => Preface::not_expected(stream),
    };
    Some(Accepted { io, h2 })
}
