//! The fingerprint's tests: today's hashes pinned (the default policy must not change
//! them), and each option of the policy.

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, Uri};

use super::*;
use crate::config::{BodyMode, FingerprintPolicy, QueryMode};

#[test]
fn lower_hex_is_what_hex_encode_writes() {
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(lower_hex(&bytes), hex::encode(&bytes));
    let id = RecordId([0xa5; 32]);
    let mut key = String::from("p:");
    id.push_hex(&mut key);
    assert_eq!(key, format!("p:{}", hex::encode([0xa5; 32])));
    assert_eq!(id.short(), "a5a5a5a5a5a5");
}

fn fp(ct: Option<&'static str>, body: &str) -> Fingerprint {
    let uri: Uri = "/v1/payments?x=1".parse().unwrap();
    Fingerprint::new(
        &DEFAULT,
        &Method::POST,
        &uri,
        &content_type(ct),
        body.as_bytes(),
    )
}

const DEFAULT: FingerprintPolicy = FingerprintPolicy {
    ignore_json: Vec::new(),
    headers: Vec::new(),
    body: BodyMode::CanonicalJson,
    query: QueryMode::Exact,
};

fn content_type(ct: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(ct) = ct {
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
    }
    headers
}

const JSON: Option<&str> = Some("application/json");

#[test]
fn reordered_json_keys_and_whitespace_match() {
    assert_eq!(
        fp(JSON, r#"{"a":1,"b":2}"#),
        fp(JSON, r#"{ "b":2, "a":1 }"#)
    );
    assert_eq!(
        fp(
            Some("application/merge-patch+json; charset=utf-8"),
            r#"{"x":{"d":[1,2],"c":null}}"#
        ),
        fp(
            Some("application/merge-patch+json; charset=utf-8"),
            "{\"x\":{\"c\":null,\"d\":[1, 2]}}\n"
        ),
    );
}

#[test]
fn different_values_or_order_of_arrays_differ() {
    assert_ne!(fp(JSON, r#"{"a":1}"#), fp(JSON, r#"{"a":2}"#));
    assert_ne!(fp(JSON, "[1,2]"), fp(JSON, "[2,1]"));
}

#[test]
fn precision_and_repeated_keys_are_not_blurred() {
    assert_ne!(
        fp(JSON, r#"{"amount":18446744073709551617}"#),
        fp(JSON, r#"{"amount":18446744073709551616}"#)
    );
    assert_ne!(
        fp(JSON, r#"{"to":"alice","to":"bob"}"#),
        fp(JSON, r#"{"to":"bob"}"#)
    );
}

#[test]
fn any_content_type_is_classified_without_panicking() {
    // Found by fuzz/canonical_json: the `+json` suffix was sliced at a byte offset
    // inside a multi-byte character (a client-chosen header: a panic per request).
    let body = r#"{"a":1}"#;
    for ct in [
        "x\u{e9}abcd",
        "\u{e9}\u{e9}\u{e9}",
        "a\u{20ac}json",
        "\u{7a4}\u{74f}&2",
    ] {
        let headers = content_type(Some(ct));
        let uri: Uri = "/v1/payments".parse().unwrap();
        Fingerprint::new(&DEFAULT, &Method::POST, &uri, &headers, body.as_bytes());
        assert!(!is_json(ct.as_bytes()));
    }
    assert!(is_json("application/vnd.api+JSON; x=\u{e9}".as_bytes()));
}

#[test]
fn non_json_bodies_are_compared_raw() {
    assert_ne!(
        fp(Some("text/plain"), "{\"a\":1,\"b\":2}"),
        fp(Some("text/plain"), "{\"b\":2,\"a\":1}")
    );
    assert_ne!(fp(JSON, "{not json"), fp(JSON, "{not  json"));
}

#[test]
fn method_target_and_content_type_count() {
    let uri: Uri = "/v1/payments?x=1".parse().unwrap();
    let other: Uri = "/v1/payments?x=2".parse().unwrap();
    let none = HeaderMap::new();
    let a = Fingerprint::new(&DEFAULT, &Method::POST, &uri, &none, b"");
    assert_ne!(
        a,
        Fingerprint::new(&DEFAULT, &Method::PATCH, &uri, &none, b"")
    );
    assert_ne!(
        a,
        Fingerprint::new(&DEFAULT, &Method::POST, &other, &none, b"")
    );
    assert_ne!(a, fp(Some("text/plain"), ""));
}

/// Hashes computed by the release before fingerprint policies existed: records it stored
/// must keep matching under the default policy, so these may never change.
#[test]
fn the_default_policy_hashes_as_earlier_releases_did() {
    assert_eq!(DEFAULT, FingerprintPolicy::default());
    let uri: Uri = "/v1/payments?b=2&a=1".parse().unwrap();
    let pinned = [
        (
            JSON,
            &br#"{ "b":[1,{"y":true,"x":null}], "a":"\u0041" }"#[..],
            "cf3545f158d17808ed1ef061f397a370fbb2dca991b6776c0b77aafd61204fa2",
        ),
        (
            Some("text/plain"),
            &b"amount=10"[..],
            "8e66f55d739ac514adfe3d3103d17b050f4420b9be252d577757cdbd4cac31c5",
        ),
        (
            None,
            &b""[..],
            "acb77ef662bec1779815f42d0258a66924533deea99b2ef0674fb1b9ae527163",
        ),
    ];
    for (ct, body, hash) in pinned {
        let f = Fingerprint::new(&DEFAULT, &Method::POST, &uri, &content_type(ct), body);
        assert_eq!(hex::encode(f.as_bytes()), hash, "{ct:?}");
    }
}

fn under(policy: &FingerprintPolicy, uri: &str, headers: &HeaderMap, body: &str) -> Fingerprint {
    let uri: Uri = uri.parse().unwrap();
    Fingerprint::new(policy, &Method::POST, &uri, headers, body.as_bytes())
}

fn ignoring(pointers: &[&str]) -> FingerprintPolicy {
    FingerprintPolicy {
        ignore_json: pointers.iter().map(|p| p.parse().unwrap()).collect(),
        ..FingerprintPolicy::default()
    }
}

#[test]
fn ignored_json_values_do_not_count() {
    let policy = ignoring(&["/client_ts", "/items/*/trace"]);
    let json = content_type(JSON);
    let f = |body| under(&policy, "/v1/p", &json, body);
    let a = f(r#"{"amount":5,"client_ts":1,"items":[{"id":1,"trace":"a"}]}"#);
    assert_eq!(
        a,
        f(r#"{"items":[{"trace":"b","id":1}],"client_ts":2,"amount":5}"#)
    );
    assert_eq!(a, f(r#"{"amount":5,"items":[{"id":1}]}"#));
    assert_ne!(
        a,
        f(r#"{"amount":6,"client_ts":1,"items":[{"id":1,"trace":"a"}]}"#)
    );
    assert_ne!(
        a,
        f(r#"{"amount":5,"client_ts":1,"items":[{"id":2,"trace":"a"}]}"#)
    );
    // Not JSON (by content type or by syntax): bytes, the pointers do not apply.
    let text = content_type(Some("text/plain"));
    let t = |body| under(&policy, "/v1/p", &text, body);
    assert_ne!(
        t(r#"{"amount":5,"client_ts":1}"#),
        t(r#"{"amount":5,"client_ts":2}"#)
    );
    assert_ne!(
        f(r#"{"amount":5,"client_ts":1"#),
        f(r#"{"amount":5,"client_ts":2"#)
    );
    // Every policy but the default is part of the hash: even where it leaves the body
    // as it is, it does not give the default policy's hash (a record stored under one
    // policy matches, under another, only what it matches under its own).
    let body = r#"{"amount":5}"#;
    let default = under(&DEFAULT, "/v1/p", &json, body);
    let nothing = under(&ignoring(&["/nothing"]), "/v1/p", &json, body);
    assert_ne!(nothing, default);
    assert_eq!(
        nothing,
        under(&ignoring(&["/nothing"]), "/v1/p", &json, body)
    );
    assert_ne!(nothing, under(&ignoring(&["/other"]), "/v1/p", &json, body));
}

#[test]
fn named_headers_count_with_all_their_values() {
    let policy = FingerprintPolicy {
        headers: vec![
            "stripe-account".parse().unwrap(),
            "content-language".parse().unwrap(),
        ],
        ..FingerprintPolicy::default()
    };
    let with = |pairs: &[(&'static str, &'static str)]| {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        under(&policy, "/v1/p", &headers, "{}")
    };
    let a = with(&[("stripe-account", "acct_1")]);
    assert_eq!(
        a,
        with(&[("stripe-account", " acct_1\t"), ("x-other", "1")])
    );
    assert_ne!(a, with(&[("stripe-account", "acct_2")]));
    assert_ne!(a, with(&[]));
    assert_ne!(with(&[]), with(&[("stripe-account", "")]));
    assert_ne!(
        a,
        with(&[("stripe-account", "acct_1"), ("stripe-account", "x")])
    );
    assert_ne!(
        with(&[("stripe-account", "a"), ("stripe-account", "b")]),
        with(&[("stripe-account", "b"), ("stripe-account", "a")])
    );
    assert_ne!(a, with(&[("content-language", "acct_1")]));
    // Not named: no effect, and an empty list hashes as the default.
    let plain = under(&DEFAULT, "/v1/p", &HeaderMap::new(), "{}");
    let mut other = HeaderMap::new();
    other.insert("stripe-account", HeaderValue::from_static("acct_9"));
    assert_eq!(plain, under(&DEFAULT, "/v1/p", &other, "{}"));
}

#[test]
fn body_modes_bytes_and_none() {
    let json = content_type(JSON);
    let bytes = FingerprintPolicy {
        body: BodyMode::Bytes,
        ..FingerprintPolicy::default()
    };
    let none = FingerprintPolicy {
        body: BodyMode::None,
        ..FingerprintPolicy::default()
    };
    assert_ne!(
        under(&bytes, "/p", &json, r#"{"a":1,"b":2}"#),
        under(&bytes, "/p", &json, r#"{"b":2,"a":1}"#)
    );
    assert_eq!(
        under(&bytes, "/p", &json, r#"{"a":1}"#),
        under(&bytes, "/p", &json, r#"{"a":1}"#)
    );
    assert_eq!(
        under(&none, "/p", &json, r#"{"a":1}"#),
        under(&none, "/p", &json, "anything else")
    );
    assert_ne!(under(&none, "/p", &json, ""), under(&none, "/q", &json, ""));
    // Each mode hashes differently from the others for one JSON body.
    let modes = [&DEFAULT, &bytes, &none].map(|p| under(p, "/p", &json, "{}"));
    assert!(modes[0] != modes[1] && modes[1] != modes[2] && modes[0] != modes[2]);
}

#[test]
fn a_sorted_query_ignores_parameter_order_only() {
    let sorted = FingerprintPolicy {
        query: QueryMode::Sorted,
        ..FingerprintPolicy::default()
    };
    let default = DEFAULT;
    let h = HeaderMap::new();
    let f = |policy, uri| under(policy, uri, &h, "");
    assert_eq!(f(&sorted, "/p?a=1&b=2"), f(&sorted, "/p?b=2&a=1"));
    assert_ne!(f(&default, "/p?a=1&b=2"), f(&default, "/p?b=2&a=1"));
    assert_ne!(f(&sorted, "/p?a=1&b=2"), f(&sorted, "/p?a=1&b=3"));
    assert_ne!(f(&sorted, "/p?a=1&a=2"), f(&sorted, "/p?a=1"));
    assert_eq!(f(&sorted, "/p?a=1&a=2"), f(&sorted, "/p?a=2&a=1"));
    assert_ne!(f(&sorted, "/p?a=1"), f(&sorted, "/q?a=1"));
    // The policy is part of the hash: an ordered query, or none, does not hash as
    // under `exact`.
    assert_ne!(f(&sorted, "/p?a=1&b=2"), f(&default, "/p?a=1&b=2"));
    assert_ne!(f(&sorted, "/p"), f(&default, "/p"));
    assert_eq!(trim_ows(b" \t x y \t"), b"x y");
    assert_eq!(trim_ows(b"  "), b"");
}

#[test]
fn a_grpc_calls_encoding_counts_and_identity_is_its_absence() {
    let framed = "\u{1}\0\0\0\u{3}abc";
    let grpc = |encoding: Option<&'static str>| {
        let mut h = content_type(Some("application/grpc"));
        if let Some(e) = encoding {
            h.insert("grpc-encoding", HeaderValue::from_static(e));
        }
        under(&DEFAULT, "/demo.Payments/Create", &h, framed)
    };
    assert_ne!(grpc(Some("gzip")), grpc(Some("deflate")));
    assert_ne!(grpc(Some("gzip")), grpc(None));
    assert_eq!(grpc(Some("gzip")), grpc(Some(" gzip ")));
    assert_eq!(grpc(Some("identity")), grpc(None));
    // Without compression, the hash earlier releases computed.
    let mut h = content_type(Some("application/grpc"));
    let plain = under(&DEFAULT, "/demo.Payments/Create", &h, framed);
    let uri: Uri = "/demo.Payments/Create".parse().unwrap();
    let mut earlier = Sha256::new();
    field(&mut earlier, b"POST");
    field(&mut earlier, uri.path().as_bytes());
    field(&mut earlier, b"application/grpc");
    raw(&mut earlier, framed.as_bytes());
    assert_eq!(plain.as_bytes(), &<[u8; 32]>::from(earlier.finalize()));
    // Not a gRPC call: the header is any other header, not hashed by default.
    h = content_type(JSON);
    let json = |h: &HeaderMap| under(&DEFAULT, "/p", h, "{}");
    let without = json(&h);
    h.insert("grpc-encoding", HeaderValue::from_static("gzip"));
    assert_eq!(json(&h), without);
}
