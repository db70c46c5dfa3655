//! Header rules of a reverse proxy: which headers are hop-by-hop (never forwarded,
//! never stored), and what the gateway adds on the way upstream.

use std::net::IpAddr;

use http::header::{
    CONNECTION, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING,
    UPGRADE,
};
use http::{HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// RFC 9110 section 7.6.1: the fixed hop-by-hop fields plus any named in `Connection`.
pub fn is_hop_by_hop(name: &HeaderName, headers: &HeaderMap) -> bool {
    const FIXED: [HeaderName; 9] = [
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
    FIXED.contains(name) || connection_lists(headers, name)
}

fn connection_lists(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|token| token.trim().eq_ignore_ascii_case(name.as_str()))
        })
    })
}

/// Removes hop-by-hop headers in place.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n, headers))
        .cloned()
        .collect();
    for name in named {
        headers.remove(name);
    }
}

/// Prepares a client's request headers for the upstream: hop-by-hop removed, the
/// client address appended to `X-Forwarded-For`, `X-Forwarded-Proto` and
/// `X-Forwarded-Host` set, and `Host` left for the client library to fill from the
/// upstream URL. The idempotency key header is kept, so the upstream can deduplicate too.
pub fn prepare_upstream_request(headers: &mut HeaderMap, peer: IpAddr) {
    strip_hop_by_hop(headers);
    if let Some(host) = headers.remove(HOST) {
        headers.insert(X_FORWARDED_HOST, host);
    }
    let forwarded = match headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {peer}"),
        None => peer.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded) {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_fixed_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Secret-Hop"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("idempotency-key", HeaderValue::from_static("k"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["content-type", "idempotency-key"]);
    }

    #[test]
    fn appends_forwarding_headers() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.example"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        prepare_upstream_request(&mut h, "127.0.0.9".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
        assert!(h.get("host").is_none());
    }
}
