//! Sealing at rest, tested: nothing in plaintext, an edited or moved record does not
//! open, old keys open after rotation, a resendable request under its own label.

use std::path::PathBuf;

use http::{HeaderMap, HeaderValue, StatusCode};

use super::*;

fn ring(active: &str, ids: &[&str]) -> Keyring {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<(String, PathBuf)> = (ids.iter().enumerate())
        .map(|(i, id)| {
            let path = dir.path().join(id);
            // A distinct 32-byte key per position: "<i>" repeated, in base64.
            let key = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                [b'a' + i as u8; 32],
            );
            std::fs::write(&path, format!("{key}\n")).unwrap();
            (id.to_string(), path)
        })
        .collect();
    Keyring::from_files(&keys, active, true).unwrap()
}

fn at(n: u8) -> Binding {
    Binding {
        scope: Scope::from_hex(&hex::encode([n; 32])).unwrap(),
        record: RecordId::from_hex(&hex::encode([n + 1; 32])).unwrap(),
    }
}

fn response() -> StoredResponse {
    let mut h = HeaderMap::new();
    h.append("content-type", HeaderValue::from_static("application/json"));
    h.append("x-account", HeaderValue::from_static("DE89 3704 0044"));
    let body = Bytes::from_static(b"{\"card\":\"4111111111111111\"}");
    StoredResponse::from_upstream(StatusCode::CREATED, &h, body)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_resendable_request_is_sealed_under_its_own_label() {
    let sealing = Sealing::new(Some(ring("k1", &["k1"])));
    let request = Bytes::from_static(b"K\x01POST idempotency-key: secret-key");
    let sealed = sealing.seal_request(&request, at(1));
    assert!(!sealed.windows(10).any(|w| w == b"secret-key"));
    assert_eq!(
        sealing.open_request(sealed.clone(), at(1)).unwrap(),
        request
    );
    // Bound to its record, and never opened as a response (nor the reverse).
    assert!(sealing.open_request(sealed.clone(), at(2)).is_err());
    let as_response = StoredRecord::sealed(sealed).unwrap();
    assert!(matches!(
        sealing.open(as_response, at(1)),
        Err(Unreadable::Forged(_))
    ));
    let response = sealing.seal(&response().encode(), at(1)).unwrap();
    assert!(sealing.open_request(response, at(1)).is_err());
    // Without encryption it is kept as it is.
    assert_eq!(Sealing::default().seal_request(&request, at(1)), request);
}

#[test]
fn seals_and_opens_without_plaintext_at_rest() {
    let sealing = Sealing::new(Some(ring("k1", &["k1"])));
    let sealed = sealing.seal(&response().encode(), at(1)).unwrap();
    assert!(!contains(&sealed, b"4111111111111111"));
    assert!(!contains(&sealed, b"DE89"));
    assert!(!contains(&sealed, b"application/json"));
    assert_eq!(
        sealed.len(),
        2 + 2 + NONCE_LEN + response().encoded_len() + TAG_LEN
    );
    let record = StoredRecord::decode(sealed.clone()).unwrap();
    assert_eq!(sealing.open(record, at(1)).unwrap(), response());
    // A fresh nonce each time.
    assert_ne!(sealing.seal(&response().encode(), at(1)).unwrap(), sealed);
}

#[test]
fn an_edited_or_moved_record_does_not_open() {
    let sealing = Sealing::new(Some(ring("k1", &["k1"])));
    let sealed = sealing.seal(&response().encode(), at(1)).unwrap();
    let moved = sealing.open(StoredRecord::Sealed(sealed.clone()), at(2));
    assert_eq!(moved, Err(Unreadable::Forged("k1".into())));
    let other_scope = Binding {
        scope: at(2).scope,
        ..at(1)
    };
    assert!(sealing
        .open(StoredRecord::Sealed(sealed.clone()), other_scope)
        .is_err());
    for i in 4..sealed.len() {
        let mut edited = sealed.to_vec();
        edited[i] ^= 0x01;
        let opened = StoredRecord::sealed(edited.into())
            .map_err(|_| Unreadable::Malformed(""))
            .and_then(|r| sealing.open(r, at(1)));
        assert!(opened.is_err(), "byte {i} flipped still opens");
    }
}

#[test]
fn old_keys_open_their_records_after_rotation() {
    let before = Sealing::new(Some(ring("k1", &["k1", "k2"])));
    let after = Sealing::new(Some(ring("k2", &["k1", "k2"])));
    let old = before.seal(&response().encode(), at(1)).unwrap();
    let new = after.seal(&response().encode(), at(1)).unwrap();
    assert_eq!(&old[2..4], b"k1");
    assert_eq!(&new[2..4], b"k2");
    assert_eq!(
        after.open(StoredRecord::Sealed(old), at(1)).unwrap(),
        response()
    );
    // Retired from the ring: its records no longer open.
    let retired = Sealing::new(Some(ring("k2", &["k2"])));
    let again = before.seal(&response().encode(), at(1)).unwrap();
    assert_eq!(
        retired.open(StoredRecord::Sealed(again), at(1)),
        Err(Unreadable::UnknownKey("k1".into()))
    );
}

#[test]
fn without_keys_sealed_records_never_open_and_plain_ones_do() {
    let on = Sealing::new(Some(ring("k1", &["k1"])));
    let off = Sealing::default();
    let sealed = on.seal(&response().encode(), at(1)).unwrap();
    assert_eq!(
        off.open(StoredRecord::Sealed(sealed), at(1)),
        Err(Unreadable::NoKeys)
    );
    assert!(off.seal(&response().encode(), at(1)).is_none());
    let plain = StoredRecord::decode(response().encode()).unwrap();
    assert_eq!(on.open(plain.clone(), at(1)).unwrap(), response());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k");
    std::fs::write(&path, format!("{}\n", "A".repeat(43) + "=")).unwrap();
    let strict = Keyring::from_files(&[("k".into(), path)], "k", false).unwrap();
    let strict = Sealing::new(Some(strict));
    assert_eq!(strict.open(plain, at(1)), Err(Unreadable::Unsealed));
}
