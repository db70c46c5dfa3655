//! The sealed envelope under `[encryption]` (`idempotency::sealed`).
//! Properties: arbitrary bytes never panic and never open as a sealed record (under
//! the ring, without keys); an unsealed record opens only while `replay_unsealed` is
//! on; a response sealed at (scope, record id) opens there to itself, and fails under
//! another record id, another scope, or with any one bit flipped.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::Unstructured;
use bytes::Bytes;
use idemgate::idempotency::{Binding, Keyring, RecordId, Scope, Sealing, StoredRecord, Unreadable};
use libfuzzer_sys::fuzz_target;

/// Key files, written once per process: `k1` and `k2`, distinct keys.
fn key_files() -> &'static Vec<(String, PathBuf)> {
    static FILES: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("idemgate-fuzz-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ["k1", "k2"]
            .iter()
            .zip([
                "MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=",
                "MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI=",
            ])
            .map(|(id, key)| {
                let path = dir.join(id);
                std::fs::write(&path, format!("{key}\n")).unwrap();
                (id.to_string(), path)
            })
            .collect()
    })
}

/// The ring with both keys, `active` sealing (built once per combination).
fn sealing(active: &str, replay_unsealed: bool) -> Sealing {
    static RINGS: OnceLock<Vec<(String, bool, Sealing)>> = OnceLock::new();
    let rings = RINGS.get_or_init(|| {
        let mut rings = Vec::new();
        for id in ["k1", "k2"] {
            for unsealed in [true, false] {
                let ring = Keyring::from_files(key_files(), id, unsealed).unwrap();
                rings.push((id.to_string(), unsealed, Sealing::new(Some(ring))));
            }
        }
        rings
    });
    let found = rings
        .iter()
        .find(|(id, unsealed, _)| id == active && *unsealed == replay_unsealed);
    found.expect("k1 or k2").2.clone()
}

fn binding(scope: [u8; 32], record: [u8; 32]) -> Binding {
    Binding {
        scope: Scope::from_hex(&hex(&scope)).unwrap(),
        record: RecordId::from_hex(&hex(&record)).unwrap(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn arbitrary_bytes(data: &[u8]) {
    let at = binding([1; 32], [2; 32]);
    let (ring, strict, off) = (
        sealing("k1", true),
        sealing("k1", false),
        Sealing::default(),
    );
    let raw = Bytes::copy_from_slice(data);
    if let Ok(record) = StoredRecord::sealed(raw.clone()) {
        assert!(
            ring.open(record.clone(), at).is_err(),
            "forged bytes opened"
        );
        assert_eq!(off.open(record, at), Err(Unreadable::NoKeys));
    }
    match StoredRecord::decode(raw) {
        Ok(record @ StoredRecord::Sealed(_)) => {
            assert!(ring.open(record, at).is_err(), "forged bytes opened");
        }
        Ok(StoredRecord::Plain(plain)) => {
            let record = StoredRecord::Plain(plain.clone());
            assert_eq!(ring.open(record.clone(), at), Ok(plain.clone()));
            assert_eq!(off.open(record.clone(), at), Ok(plain));
            assert_eq!(strict.open(record, at), Err(Unreadable::Unsealed));
        }
        Err(_) => {}
    }
}

fn sealed_round_trip(u: &mut Unstructured) -> arbitrary::Result<()> {
    let response = idemgate_fuzz::stored_response(u)?;
    let (scope, record): ([u8; 32], [u8; 32]) = (u.arbitrary()?, u.arbitrary()?);
    let (other_scope, other_record): ([u8; 32], [u8; 32]) = (u.arbitrary()?, u.arbitrary()?);
    let flip: (usize, u8) = u.arbitrary()?;
    let active = *u.choose(&["k1", "k2"])?;
    let at = binding(scope, record);
    let sealer = sealing(active, true);
    let sealed = sealer.seal(&response.encode(), at).expect("a ring seals");
    // Any ring holding the key opens it, whichever key is active now.
    let reader = sealing(if active == "k1" { "k2" } else { "k1" }, false);
    let record_bytes = StoredRecord::decode(sealed.clone()).expect("a sealed record decodes");
    assert_eq!(reader.open(record_bytes.clone(), at), Ok(response));
    if other_record != record {
        let moved = binding(scope, other_record);
        assert!(
            reader.open(record_bytes.clone(), moved).is_err(),
            "opened under another record id"
        );
    }
    if other_scope != scope {
        let moved = binding(other_scope, record);
        assert!(
            reader.open(record_bytes, moved).is_err(),
            "opened in another scope"
        );
    }
    let mut edited = sealed.to_vec();
    let at_byte = flip.0 % edited.len();
    edited[at_byte] ^= flip.1.max(1);
    if let Ok(record) = StoredRecord::decode(Bytes::from(edited)) {
        assert!(
            reader.open(record, at).is_err(),
            "byte {at_byte} edited, still opens"
        );
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    arbitrary_bytes(data);
    let _ = sealed_round_trip(&mut Unstructured::new(data));
});
