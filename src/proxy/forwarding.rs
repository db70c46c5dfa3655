//! Forwarding headers: what the gateway tells an upstream about the client connection a
//! request came on (`X-Forwarded-For`, `-Proto`, `-Host`, `Forwarded`), and from whom
//! it believes what a client says of them (`server.trusted_proxies`).

use std::io::Write;
use std::net::IpAddr;

use http::header::{FORWARDED, HOST};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::ServerConfig;

pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The other end of a client connection: its address, whether it is one of
/// `server.trusted_proxies`, and whether it came over TLS (`[server.tls]`: the proxy
/// listener then serves HTTPS only).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub ip: IpAddr,
    pub trusted: bool,
    pub tls: bool,
}

impl Peer {
    pub fn new(ip: IpAddr, server: &ServerConfig) -> Self {
        Self {
            ip: ip.to_canonical(),
            trusted: server.trusted_proxies.contains(ip),
            tls: server.tls.files().is_some(),
        }
    }

    /// The scheme the client spoke to the gateway: `X-Forwarded-Proto` unless a trusted
    /// proxy said it.
    fn proto(self) -> HeaderValue {
        HeaderValue::from_static(if self.tls { "https" } else { "http" })
    }
}

/// Sets the forwarding headers on a request already through [`sanitize_incoming`](super::headers::sanitize_incoming),
/// and removes `Host` for the client library to fill from the upstream URL. The
/// idempotency key header is kept, so the upstream can deduplicate too.
///
/// From a trusted proxy, the address is appended to `X-Forwarded-For` (and to the
/// `for=` chain of a `Forwarded` it sent), and its `X-Forwarded-Proto` and
/// `X-Forwarded-Host` are kept. From anyone else, `X-Forwarded-For` is the peer
/// address alone, `-Proto` is the listener's scheme (`https` with `[server.tls]`, else
/// `http`), `-Host` is the request's `Host` (HTTP/2's `:authority`, see
/// [`super::headers::normalize_incoming`]; absent without one), and `Forwarded` is dropped.
pub fn prepare_upstream_request(headers: &mut HeaderMap, peer: Peer) {
    let host = headers.remove(HOST);
    let chain = chained(headers, X_FORWARDED_FOR, peer, b"", b"");
    match chain {
        Some(value) => headers.insert(X_FORWARDED_FOR, value),
        None => headers.remove(X_FORWARDED_FOR),
    };
    if !peer.trusted {
        headers.remove(X_FORWARDED_HOST);
        headers.remove(X_FORWARDED_PROTO);
        headers.remove(FORWARDED);
    } else if headers.contains_key(FORWARDED) {
        let (open, close): (&[u8], &[u8]) = match peer.ip {
            IpAddr::V4(_) => (b"for=", b""),
            IpAddr::V6(_) => (b"for=\"[", b"]\""),
        };
        if let Some(value) = chained(headers, FORWARDED, peer, open, close) {
            headers.insert(FORWARDED, value);
        }
    }
    if let Some(host) = host {
        if !headers.contains_key(X_FORWARDED_HOST) {
            headers.insert(X_FORWARDED_HOST, host);
        }
    }
    if !headers.contains_key(X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, peer.proto());
    }
}

/// The value of `name` with the peer address appended: after every value already
/// there if the peer is trusted, alone otherwise. One allocation.
fn chained(
    headers: &HeaderMap,
    name: HeaderName,
    peer: Peer,
    open: &[u8],
    close: &[u8],
) -> Option<HeaderValue> {
    let mut out = Vec::with_capacity(64);
    if peer.trusted {
        for prior in headers.get_all(name).iter().filter(|v| !v.is_empty()) {
            out.extend_from_slice(prior.as_bytes());
            out.extend_from_slice(b", ");
        }
    }
    out.extend_from_slice(open);
    write!(out, "{}", peer.ip).ok()?;
    out.extend_from_slice(close);
    HeaderValue::try_from(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str, trusted: bool) -> Peer {
        Peer {
            ip: ip.parse().unwrap(),
            trusted,
            tls: false,
        }
    }

    fn spoofed() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.example"));
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.2"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        h.insert(
            "x-forwarded-host",
            HeaderValue::from_static("front.example"),
        );
        h.insert(
            "forwarded",
            HeaderValue::from_static("for=10.0.0.1;proto=https"),
        );
        h
    }

    #[test]
    fn untrusted_peers_get_their_forwarding_headers_replaced() {
        let mut h = spoofed();
        prepare_upstream_request(&mut h, peer("127.0.0.9", false));
        assert_eq!(h["x-forwarded-for"], "127.0.0.9");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
        assert!(h.get("forwarded").is_none() && h.get("host").is_none());

        let mut h = spoofed();
        h.remove("host");
        prepare_upstream_request(&mut h, peer("::ffff:127.0.0.9", false));
        assert!(
            h.get("x-forwarded-host").is_none(),
            "no Host: no X-Forwarded-Host"
        );
    }

    #[test]
    fn trusted_peers_get_their_forwarding_headers_extended() {
        let mut h = spoofed();
        prepare_upstream_request(&mut h, peer("127.0.0.9", true));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 127.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "front.example");
        assert_eq!(h["forwarded"], "for=10.0.0.1;proto=https, for=127.0.0.9");
        assert!(h.get("host").is_none());

        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.example"));
        h.insert("forwarded", HeaderValue::from_static("for=x"));
        prepare_upstream_request(&mut h, peer("fd00::1", true));
        assert_eq!(h["x-forwarded-for"], "fd00::1");
        assert_eq!(h["forwarded"], "for=x, for=\"[fd00::1]\"");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
    }

    #[test]
    fn the_peer_address_is_canonical_and_checked_against_the_list() {
        let mut server = ServerConfig {
            trusted_proxies: crate::config::TrustedProxies(vec!["10.0.0.0/8".parse().unwrap()]),
            ..ServerConfig::default()
        };
        let p = Peer::new("::ffff:10.1.2.3".parse().unwrap(), &server);
        assert!(p.trusted && !p.tls);
        assert_eq!(p.ip.to_string(), "10.1.2.3");
        assert!(!Peer::new("11.0.0.1".parse().unwrap(), &server).trusted);
        server.tls.cert = Some("c.pem".into());
        server.tls.key = Some("k.pem".into());
        assert!(Peer::new("11.0.0.1".parse().unwrap(), &server).tls);
    }

    #[test]
    fn over_tls_the_proto_is_https_unless_a_trusted_proxy_said_otherwise() {
        let over_tls = |trusted| Peer {
            tls: true,
            ..peer("127.0.0.9", trusted)
        };
        let mut h = spoofed();
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        prepare_upstream_request(&mut h, over_tls(false));
        assert_eq!(h["x-forwarded-proto"], "https");
        let mut h = spoofed();
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        prepare_upstream_request(&mut h, over_tls(true));
        assert_eq!(h["x-forwarded-proto"], "http", "the trusted proxy's own");
    }
}
