//! The stored response encoding (`idempotency::replay`): the header block Postgres
//! keeps beside status and body, and the whole record Redis keeps.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, LOCATION, SET_COOKIE};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use idemgate::idempotency::StoredResponse;
use proptest::prelude::*;
use proptest::sample::Index;

use crate::cases;

/// Token characters (RFC 9110 5.6.2), lower case as `HeaderName` keeps them.
const TCHAR: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~";

fn name() -> impl Strategy<Value = HeaderName> {
    let custom = prop::collection::vec(prop::sample::select(TCHAR), 1..40);
    prop_oneof![
        prop::sample::select(vec![
            CONTENT_TYPE,
            SET_COOKIE,
            LOCATION,
            ETAG,
            CACHE_CONTROL
        ]),
        custom.prop_map(|s| HeaderName::from_bytes(&s).unwrap()),
    ]
}

/// Every byte a header value may hold: visible ASCII, SP, HTAB and obs-text.
fn value() -> impl Strategy<Value = HeaderValue> {
    let byte = any::<u8>().prop_map(|b| match b {
        b'\t' | 0x20..=0x7e | 0x80..=0xff => b,
        _ => b'\t',
    });
    prop::collection::vec(byte, 0..48).prop_map(|b| HeaderValue::from_bytes(&b).unwrap())
}

fn headers() -> impl Strategy<Value = Vec<(HeaderName, HeaderValue)>> {
    prop::collection::vec((name(), value()), 0..24)
}

fn response() -> impl Strategy<Value = StoredResponse> {
    let body = prop::collection::vec(any::<u8>(), 0..128);
    // Trailers: none (encoding 1) as often as some (encoding 3).
    let trailers = prop_oneof![Just(Vec::new()), headers()];
    (100u16..=999, headers(), body, trailers).prop_map(|(status, headers, body, trailers)| {
        StoredResponse {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: Bytes::from(body),
            trailers,
            origin: None,
        }
    })
}

fn assert_round_trips(r: &StoredResponse) -> Result<(), TestCaseError> {
    let block = r.encode_headers();
    let parts = StoredResponse::from_stored_parts(r.status.as_u16(), block, r.body.clone());
    prop_assert_eq!(&parts.unwrap(), r);
    let whole = r.encode();
    prop_assert_eq!(whole.len(), r.encoded_len());
    prop_assert_eq!(&StoredResponse::decode(whole).unwrap(), r);
    prop_assert_eq!(&r.compacted(), r);
    Ok(())
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn every_header_set_round_trips(r in response()) {
        assert_round_trips(&r)?;
    }

    #[test]
    fn what_an_upstream_sends_round_trips(status in 100u16..=599, pairs in headers()) {
        let mut map = HeaderMap::new();
        for (n, v) in pairs {
            map.append(n, v);
        }
        let status = StatusCode::from_u16(status).unwrap();
        let r = StoredResponse::from_upstream(status, &map, Bytes::from_static(b"{}"));
        assert_round_trips(&r)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        raw in prop::collection::vec(any::<u8>(), 0..256), status in any::<u16>(),
    ) {
        for input in [raw.clone(), [&[1, 0, 200][..], &raw].concat()] {
            if let Ok(r) = StoredResponse::decode(Bytes::from(input)) {
                prop_assert_eq!(StoredResponse::decode(r.encode()).unwrap(), r);
            }
        }
        let block = Bytes::from(raw);
        if let Ok(r) = StoredResponse::from_stored_parts(status, block, Bytes::new()) {
            prop_assert_eq!(StoredResponse::decode(r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn damaged_encodings_never_panic(r in response(), cut in any::<Index>(), at in any::<Index>(), bit in 0u8..8) {
        let whole = r.encode();
        let _ = StoredResponse::decode(whole.slice(..cut.index(whole.len() + 1)));
        let mut flipped = whole.to_vec();
        let i = at.index(flipped.len());
        flipped[i] ^= 1 << bit;
        let _ = StoredResponse::decode(Bytes::from(flipped));
        let block = r.encode_headers();
        let _ = StoredResponse::from_stored_parts(200, block.slice(..cut.index(block.len() + 1)), Bytes::new());
    }
}

#[test]
fn the_largest_name_and_a_value_past_64_kib_round_trip() {
    let name = HeaderName::from_bytes(&[b'x'; 65_535]).unwrap();
    let value = HeaderValue::from_bytes(&[b'v'; 70_000]).unwrap();
    let r = StoredResponse {
        status: StatusCode::OK,
        headers: vec![(name, value)],
        body: Bytes::from_static(b"body"),
        trailers: Vec::new(),
        origin: None,
    };
    assert_round_trips(&r).unwrap();
}

/// Corpus: more headers than the u16 count holds. The count wrapped to 0 and the
/// headers' bytes were read back as the body.
#[test]
fn headers_beyond_the_count_field_are_dropped_not_read_as_the_body() {
    let mut map = HeaderMap::new();
    for i in 0..65_536 + 3 {
        map.append(ETAG, HeaderValue::from(i));
    }
    let body = Bytes::from_static(b"body");
    let first = StoredResponse::from_upstream(StatusCode::OK, &map, body.clone());
    assert_eq!(first.headers.len(), 65_535);
    let replay = StoredResponse::decode(first.encode()).unwrap();
    assert!(
        replay == first,
        "the replay differs from the first response"
    );

    let built = StoredResponse {
        headers: map.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
        ..first
    };
    assert_eq!(built.encode().len(), built.encoded_len());
    let back = StoredResponse::decode(built.encode()).unwrap();
    assert!(back.body == body, "header bytes were read back as the body");
    assert!(back.headers[..] == built.headers[..65_535]);
}
