//! Canonical JSON (`idempotency::canonical::canonicalize`) on arbitrary bytes.
//! Properties: never panics; `canon(canon(x)) == canon(x)`; the canonical form is
//! JSON with the same value as the input (as serde_json reads both); the input and its
//! canonical form get the same fingerprint. (`json_pairs` generates documents and
//! checks reordering, re-spacing and changed values.)
#![no_main]

use http::{HeaderValue, Method, Uri};
use idemgate::idempotency::canonical::canonicalize;
use idemgate::idempotency::Fingerprint;
use libfuzzer_sys::fuzz_target;

fn fingerprint(body: &[u8]) -> Fingerprint {
    let uri = Uri::from_static("/v1/payments");
    let json = HeaderValue::from_static("application/json");
    Fingerprint::new(&Method::POST, &uri, Some(&json), body)
}

fuzz_target!(|data: &[u8]| {
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
