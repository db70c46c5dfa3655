//! Header rules of a reverse proxy: which headers are hop-by-hop (never forwarded,
//! never stored), which only the gateway may set, and how an HTTP/2 request's headers
//! are made those of its HTTP/1.1 form. (What the gateway adds on the way upstream:
//! [`super::forwarding`].)
//!
//! Order matters. [`sanitize_incoming`] runs first on every request, before anything
//! reads its headers: hop-by-hop headers (including those a client names in
//! `Connection`) and gateway-owned headers are gone before the gateway inserts its own
//! (`X-Request-Id`, `Idempotency-Fencing-Token`, the forwarding headers), so a client
//! can neither smuggle one in nor have one stripped. Then [`normalize_incoming`] makes
//! an HTTP/2 request look as its HTTP/1.1 form would: `Host` from `:authority`, and
//! its `cookie` fields joined into one, so that keys, scopes and fingerprints (and the
//! upstream) see the same headers whichever protocol the client spoke.

use http::header::{
    CONNECTION, COOKIE, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

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
    // Most messages hold none: one pass over their names costs less than a lookup per
    // fixed field (`Connection` among them, so none is named either).
    if !headers.keys().any(|name| FIXED_HOP_BY_HOP.contains(name)) {
        return;
    }
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
    if !headers
        .keys()
        .any(|name| GATEWAY_OWNED_REQUEST.contains(name))
    {
        return;
    }
    for name in &GATEWAY_OWNED_REQUEST {
        headers.remove(name);
    }
}

/// What every request gets after [`sanitize_incoming`], before the gateway reads it:
///
/// * `Host` from the request target's authority, when it has one: HTTP/2's
///   `:authority` (an HTTP/2 client sends no `Host`, or one that must not differ), or
///   an HTTP/1.1 absolute-form target, which RFC 9112 section 3.2.2 says wins over
///   `Host`. It is what `X-Forwarded-Host` says upstream.
/// * Several `cookie` fields (HTTP/2 clients split them, RFC 9113 section 8.2.3) joined
///   into one with `"; "`, in the order sent: what an HTTP/1.1 upstream must get, and
///   the one value a scope or fingerprint header `cookie` hashes, however it came.
pub fn normalize_incoming(authority: Option<&Authority>, headers: &mut HeaderMap) {
    if let Some(host) = authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
        headers.insert(HOST, host);
    }
    join_cookies(headers);
}

/// Joins several `cookie` fields into one (`a=1; b=2`); one field or none is left as is.
/// Bounded by the header list the listener accepts (`server.max_header_size`).
fn join_cookies(headers: &mut HeaderMap) {
    let mut fields = headers.get_all(COOKIE).iter();
    if fields.next().is_none() || fields.next().is_none() {
        return;
    }
    let mut joined = Vec::with_capacity(256);
    for value in headers.get_all(COOKIE).iter().filter(|v| !v.is_empty()) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    // Each part was a valid value, and `; ` is too: this cannot fail.
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, value);
    }
}

/// What every upstream response gets: hop-by-hop headers are the caller's business
/// (streamed and stored responses differ), but the headers with which the gateway
/// tells a client what it did never come from an upstream. Applied to its trailers too.
pub fn strip_gateway_owned_response(headers: &mut HeaderMap) {
    for name in &GATEWAY_OWNED_RESPONSE {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn each_fixed_field_alone_is_stripped_and_a_message_without_any_is_left_as_is() {
        for hop in &FIXED_HOP_BY_HOP {
            let mut h = HeaderMap::new();
            h.insert("idempotency-key", HeaderValue::from_static("k"));
            h.insert(hop, HeaderValue::from_static("x"));
            h.insert("content-type", HeaderValue::from_static("text/plain"));
            strip_hop_by_hop(&mut h);
            assert_eq!(names(&h), ["content-type", "idempotency-key"], "{hop}");
        }
        for owned in &GATEWAY_OWNED_REQUEST {
            let mut h = HeaderMap::new();
            h.insert("x-request-id", HeaderValue::from_static("abc"));
            h.insert(owned, HeaderValue::from_static("1"));
            sanitize_incoming(&mut h);
            assert_eq!(names(&h), ["x-request-id"], "{owned}");
        }
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("a"));
        h.append("x-many", HeaderValue::from_static("1"));
        h.append("x-many", HeaderValue::from_static("2"));
        sanitize_incoming(&mut h);
        assert_eq!(h.len(), 3);
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

    #[test]
    fn the_authority_is_the_host_and_cookie_fields_are_joined() {
        let authority: Authority = "api.example:8443".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("other.example"));
        h.append("cookie", HeaderValue::from_static("a=1"));
        h.append("cookie", HeaderValue::from_static(""));
        h.append("cookie", HeaderValue::from_static("b=2; c=3"));
        normalize_incoming(Some(&authority), &mut h);
        assert_eq!(h["host"], "api.example:8443");
        assert_eq!(h.get_all("cookie").iter().count(), 1);
        assert_eq!(h["cookie"], "a=1; b=2; c=3");

        // No authority (HTTP/1.1 origin form): `Host` as sent; one cookie field as sent.
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.example"));
        h.insert("cookie", HeaderValue::from_static("a=1;b=2"));
        normalize_incoming(None, &mut h);
        assert_eq!(h["host"], "api.example");
        assert_eq!(h["cookie"], "a=1;b=2");
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
