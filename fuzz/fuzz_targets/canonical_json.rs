//! Canonical JSON (`idempotency::canonical::canonicalize`) on arbitrary bytes.
//! Properties: never panics; `canon(canon(x)) == canon(x)`; the canonical form is
//! JSON with the same value as the input (as serde_json reads both); the input and its
//! canonical form get the same fingerprint. The input as a `Content-Type` value: a
//! fingerprint never panics, and parameters never change it. (`json_pairs` generates
//! documents and checks reordering, re-spacing and changed values.)
#![no_main]

use http::{HeaderValue, Method, Uri};
use idemgate::idempotency::canonical::canonicalize;
use idemgate::idempotency::Fingerprint;
use libfuzzer_sys::fuzz_target;

fn fingerprint(body: &[u8]) -> Fingerprint {
    let uri = Uri::from_static("/v1/payments");
    let json = HeaderValue::from_static("application/json");
    Fingerprint::new(
        &Default::default(),
        &Method::POST,
        &uri,
        &http::HeaderMap::from_iter([(http::header::CONTENT_TYPE, json)]),
        body,
    )
}

/// Whether a body under `content_type` is read as JSON: two orders of one object match.
fn read_as_json(content_type: &HeaderValue) -> bool {
    let uri = Uri::from_static("/v1/payments");
    let headers = http::HeaderMap::from_iter([(http::header::CONTENT_TYPE, content_type.clone())]);
    let fp =
        |body: &[u8]| Fingerprint::new(&Default::default(), &Method::POST, &uri, &headers, body);
    fp(br#"{"a":1,"b":2}"#) == fp(br#"{"b":2,"a":1}"#)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(content_type) = HeaderValue::from_bytes(data) {
        let json = read_as_json(&content_type);
        if !data.contains(&b';') {
            let with_params = [data, b"; charset=utf-8"].concat();
            let with_params = HeaderValue::from_bytes(&with_params).unwrap();
            assert_eq!(
                json,
                read_as_json(&with_params),
                "parameters changed JSON detection"
            );
        }
    }
    let Some(canon) = canonicalize(data) else {
        return;
    };
    assert_eq!(
        canonicalize(&canon).as_ref(),
        Some(&canon),
        "not idempotent"
    );
    let read = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).ok();
    assert_eq!(
        read(data),
        read(&canon),
        "the canonical form changed the value"
    );
    assert_eq!(fingerprint(data), fingerprint(&canon));
});
