//! The resendable request's encoding (`idempotency::resendable`): what the completer reads back
//! from Postgres. Any request round-trips; arbitrary bytes and every truncation of a
//! valid encoding are an error or a request, never a panic.

use std::net::IpAddr;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use idemgate::idempotency::ResendableRequest;
use proptest::prelude::*;

use crate::cases;

const TCHAR: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~";

fn request() -> impl Strategy<Value = ResendableRequest> {
    let name = prop::collection::vec(prop::sample::select(TCHAR), 1..30)
        .prop_map(|s| HeaderName::from_bytes(&s).unwrap());
    let value = prop::collection::vec(0x20u8..0x7f, 0..40)
        .prop_map(|b| HeaderValue::from_bytes(&b).unwrap());
    let method = prop::sample::select(vec![Method::POST, Method::PATCH, Method::PUT]);
    let target = "/[a-z0-9/]{0,30}(\\?[a-z0-9=&]{0,20})?";
    let peer = prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
    ];
    let headers = prop::collection::vec((name, value), 0..12);
    let body = prop::collection::vec(any::<u8>(), 0..64);
    (method, target, headers, peer, body).prop_map(|(method, target, headers, peer, body)| {
        ResendableRequest {
            method,
            target,
            headers,
            peer,
            body: Bytes::from(body),
        }
    })
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_request_round_trips(r in request()) {
        let encoded = r.encode();
        prop_assert_eq!(&ResendableRequest::decode(encoded.clone()).unwrap(), &r);
        for cut in 0..encoded.len() {
            let _ = ResendableRequest::decode(encoded.slice(..cut));
        }
        let (parts, body, peer) = r.clone().into_parts().unwrap();
        prop_assert_eq!(parts.method, r.method);
        prop_assert_eq!(parts.headers.len(), r.headers.len());
        prop_assert_eq!((body, peer), (r.body, r.peer));
    }

    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = ResendableRequest::decode(Bytes::from(raw));
    }
}
