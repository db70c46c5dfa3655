//! Header rules of a reverse proxy: which headers are hop-by-hop (never forwarded,
//! never stored), which only the gateway may set, and what the gateway adds on the way
//! upstream.
//!
//! Order matters. [`sanitize_incoming`] runs first on every request, before anything
//! reads its headers: hop-by-hop headers (including those a client names in
//! `Connection`) and gateway-owned headers are gone before the gateway inserts its own
//! (`X-Request-Id`, `Idempotency-Fencing-Token`, the forwarding headers), so a client
//! can neither smuggle one in nor have one stripped.

use std::io::Write;
use std::net::IpAddr;

use http::header::{
    CONNECTION, FORWARDED, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::TrustedProxies;

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Correlates a request across client, gateway logs and upstream.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Grows with every acquisition of a key, so an upstream can refuse a stale holder.
pub const FENCING_TOKEN: HeaderName = HeaderName::from_static("idempotency-fencing-token");
/// Marks a request the completer sent again (docs/completer.md).
pub const COMPLETER: HeaderName = HeaderName::from_static("idempotency-completer");
/// Marks a response forwarded without idempotency because no store could take the claim.
pub const IDEMPOTENCY_STATUS: HeaderName = HeaderName::from_static("idempotency-status");
/// Header that tells a client whether it got a replay.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// `TE: trailers`, what a gRPC server requires of a request (the one `TE` HTTP/2 allows).
pub const TRAILERS: HeaderValue = HeaderValue::from_static("trailers");

/// Whether a request or response is gRPC: `Content-Type` `application/grpc`, alone or
/// with a `+format` or parameters (gRPC-Web's `application/grpc-web` is not: it
/// carries its trailers in the body, as any HTTP response).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    let value = value.as_bytes();
    let Some(rest) = value
        .get(..16)
        .filter(|p| p.eq_ignore_ascii_case(b"application/grpc"))
        .map(|_| &value[16..])
    else {
        return false;
    };
    matches!(rest.first(), None | Some(b'+' | b';' | b' '))
}

/// The fields that are hop-by-hop whatever `Connection` says (RFC 9110 section 7.6.1).
const FIXED_HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// Headers only the gateway sets: the fencing token it sends upstream with a held
/// lease, the mark of a request the completer sent again (`Idempotency-Completer`),
/// and the two it answers clients with (`Idempotency-Status`, `Idempotent-Replayed`).
/// None of them may come from a client, and the last two may not come from an
/// upstream either.
const GATEWAY_OWNED_REQUEST: [HeaderName; 4] =
    [FENCING_TOKEN, COMPLETER, IDEMPOTENCY_STATUS, REPLAYED];
const GATEWAY_OWNED_RESPONSE: [HeaderName; 2] = [IDEMPOTENCY_STATUS, REPLAYED];

/// RFC 9110 section 7.6.1: the fixed hop-by-hop fields plus any named in `Connection`.
pub fn is_hop_by_hop(name: &HeaderName, headers: &HeaderMap) -> bool {
    FIXED_HOP_BY_HOP.contains(name) || connection_lists(headers, name)
}

fn connection_lists(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|token| token.trim().eq_ignore_ascii_case(name.as_str()))
        })
    })
}

/// Removes hop-by-hop headers in place: first those `Connection` names, then the
/// fixed ones (`Connection` itself among them). Allocates only for a message with
/// more than one `Connection` field.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    match headers.get_all(CONNECTION).iter().count() {
        0 => {}
        1 => {
            if let Some(value) = headers.remove(CONNECTION) {
                remove_listed(headers, &value);
            }
        }
        _ => {
            let values: Vec<HeaderValue> = headers.get_all(CONNECTION).iter().cloned().collect();
            for value in &values {
                remove_listed(headers, value);
            }
        }
    }
    for name in &FIXED_HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Removes the headers one `Connection` value names (case-insensitively; a token that
/// is not a header name removes nothing).
fn remove_listed(headers: &mut HeaderMap, connection: &HeaderValue) {
    let Ok(listed) = connection.to_str() else {
        return;
    };
    for token in listed.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        headers.remove(token);
    }
}

/// What every request gets before the gateway reads it: hop-by-hop headers and
/// gateway-owned headers removed. The gateway then decides (key, scope, fingerprint)
/// on exactly the headers the upstream will see, plus those it adds itself.
pub fn sanitize_incoming(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    for name in &GATEWAY_OWNED_REQUEST {
        headers.remove(name);
    }
}

/// What every upstream response gets: hop-by-hop headers are the caller's business
/// (streamed and stored responses differ), but the headers with which the gateway
/// tells a client what it did never come from an upstream.
pub fn strip_gateway_owned_response(headers: &mut HeaderMap) {
    for name in &GATEWAY_OWNED_RESPONSE {
        headers.remove(name);
    }
}

/// The other end of a client connection: its address, and whether it is one of
/// `server.trusted_proxies`.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub ip: IpAddr,
    pub trusted: bool,
}

impl Peer {
    pub fn new(ip: IpAddr, trusted: &TrustedProxies) -> Self {
        Self {
            ip: ip.to_canonical(),
            trusted: trusted.contains(ip),
        }
    }
}

/// Sets the forwarding headers on a request already through [`sanitize_incoming`],
/// and removes `Host` for the client library to fill from the upstream URL. The
/// idempotency key header is kept, so the upstream can deduplicate too.
///
/// From a trusted proxy, the address is appended to `X-Forwarded-For` (and to the
/// `for=` chain of a `Forwarded` it sent), and its `X-Forwarded-Proto` and
/// `X-Forwarded-Host` are kept. From anyone else, `X-Forwarded-For` is the peer
/// address alone, `-Proto` is `http` (the listener's scheme), `-Host` is the `Host`
/// the client sent (or absent), and `Forwarded` is dropped.
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
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
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
        }
    }

    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        left
    }

    #[test]
    fn strips_fixed_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Secret-Hop"),
        );
        h.append("connection", HeaderValue::from_static(" ,x-other-hop,"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("x-other-hop", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("idempotency-key", HeaderValue::from_static("k"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), ["content-type", "idempotency-key"]);
    }

    #[test]
    fn a_connection_token_that_is_no_header_name_removes_nothing() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("close, not a name"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), ["content-type"]);
    }

    #[test]
    fn incoming_requests_lose_gateway_owned_headers() {
        let mut h = HeaderMap::new();
        h.insert("idempotency-fencing-token", HeaderValue::from_static("9"));
        h.insert("idempotency-status", HeaderValue::from_static("bypassed"));
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        sanitize_incoming(&mut h);
        assert_eq!(names(&h), ["x-request-id"]);
    }

    #[test]
    fn the_owned_names_are_the_wire_names() {
        let names =
            |owned: &[HeaderName]| owned.iter().map(HeaderName::to_string).collect::<Vec<_>>();
        assert_eq!(
            names(&GATEWAY_OWNED_REQUEST),
            [
                "idempotency-fencing-token",
                "idempotency-completer",
                "idempotency-status",
                "idempotent-replayed"
            ]
        );
        assert_eq!(
            names(&GATEWAY_OWNED_RESPONSE),
            ["idempotency-status", "idempotent-replayed"]
        );
        assert_eq!(X_REQUEST_ID.as_str(), "x-request-id");
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
        let trusted: TrustedProxies = TrustedProxies(vec!["10.0.0.0/8".parse().unwrap()]);
        let p = Peer::new("::ffff:10.1.2.3".parse().unwrap(), &trusted);
        assert!(p.trusted);
        assert_eq!(p.ip.to_string(), "10.1.2.3");
        assert!(!Peer::new("11.0.0.1".parse().unwrap(), &trusted).trusted);
    }

    #[test]
    fn grpc_is_told_by_its_content_type() {
        let with = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(ct));
            is_grpc(&h)
        };
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC; x=1",
        ] {
            assert!(with(yes), "{yes}");
        }
        for no in [
            "application/grpc-web",
            "application/grpcx",
            "application/json",
            "text/grpc",
        ] {
            assert!(!with(no), "{no}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }
}
