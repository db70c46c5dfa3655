//! The stored-response encoding and its header block (`idempotency::replay`).
//! Properties: arbitrary bytes never panic as a record, a header block, or a record of
//! either version (`StoredRecord::decode`); a corrupt record is an error; whatever
//! decodes encodes back to itself; for any response, encode then decode is the
//! identity, through every form a store uses (the whole record, the header block with
//! status and body, the one-allocation copy), and `encoded_len` is the encoding's length.
#![no_main]

use arbitrary::Unstructured;
use bytes::Bytes;
use idemgate::fuzzing::REPLAYED;
use idemgate::idempotency::{StoredRecord, StoredResponse};
use libfuzzer_sys::fuzz_target;

fn round_trips(r: &StoredResponse) {
    let encoded = r.encode();
    assert_eq!(encoded.len(), r.encoded_len());
    assert_eq!(&StoredResponse::decode(encoded.clone()).unwrap(), r);
    let status = r.status.as_u16();
    let parts = StoredResponse::from_stored_parts(status, r.encode_headers(), r.body.clone());
    // The parts keep no origin: a store keeps it beside them (Postgres' `origin` column).
    let origin = r.origin;
    assert_eq!(
        &StoredResponse {
            origin,
            ..parts.unwrap()
        },
        r
    );
    let once = r.encoded();
    assert_eq!(once.bytes, encoded);
    assert_eq!(&once.compact, r);
    assert_eq!(once.header_block(), r.encode_headers());
    assert_eq!(&r.compacted(), r);
    match StoredRecord::decode(encoded) {
        Ok(StoredRecord::Plain(plain)) => assert_eq!(&plain, r),
        other => panic!("a version 1 record read back as {other:?}"),
    }
    let response = r.to_response(true);
    assert_eq!(response.status(), r.status);
    let kept = r
        .headers
        .iter()
        .filter(|(name, _)| *name != REPLAYED)
        .count();
    assert_eq!(response.headers().len(), kept + 1);
    assert_eq!(response.headers()[REPLAYED], "true");
}

fuzz_target!(|data: &[u8]| {
    // The input as a whole record, as a record of either version, and as a header
    // block (with the first two bytes as the status).
    let raw = Bytes::copy_from_slice(data);
    if let Ok(r) = StoredResponse::decode(raw.clone()) {
        round_trips(&r);
    }
    let _ = StoredRecord::decode(raw.clone());
    if let [hi, lo, block @ ..] = data {
        let status = u16::from_be_bytes([*hi, *lo]);
        let block = Bytes::copy_from_slice(block);
        if let Ok(r) = StoredResponse::from_stored_parts(status, block, Bytes::new()) {
            round_trips(&r);
        }
    }
    // The input as the parts of a response.
    if let Ok(r) = idemgate_fuzz::stored_response(&mut Unstructured::new(data)) {
        round_trips(&r);
    }
});
