//! JSON Pointers (`config::JsonPointer`) and canonical JSON with values left out
//! (`idempotency::canonical::canonicalize_ignoring`), on arbitrary bytes: the first line
//! is pointers separated by tabs, the rest a body. Properties: parsing never panics; a
//! parsed pointer writes back as its text, has one segment per `/` and a wildcard only
//! for a `*` segment; `string_at` never panics, refuses a wildcard and otherwise finds
//! what serde_json's `Value::pointer` finds (on bodies without repeated members);
//! leaving values out never makes a body canonical or not (the same bodies have a form
//! as without pointers); the form is canonical (canonicalising it again changes
//! nothing); and it is the body's JSON value with exactly the selected values removed
//! (as serde_json reads both, checked against a plain tree walk).
#![no_main]

use idemgate::config::{JsonPointer, Segment};
use idemgate::idempotency::canonical::{canonicalize, canonicalize_ignoring};
use idemgate::idempotency::pointer::{string_at, StringAtError};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(head) = std::str::from_utf8(head) else {
        return;
    };
    let mut pointers = Vec::new();
    for text in head.split('\t') {
        if let Ok(pointer) = text.parse::<JsonPointer>() {
            check_pointer(text, &pointer, body);
            pointers.push(pointer);
        }
    }
    let plain = canonicalize(body);
    let ignoring = canonicalize_ignoring(body, &pointers);
    assert_eq!(plain.is_some(), ignoring.is_some(), "pointers {head:?}");
    let Some(out) = ignoring else {
        return;
    };
    if pointers.iter().any(|p| p.segments().is_empty()) {
        assert!(out.is_empty(), "the pointer \"\" leaves out the whole body");
        return;
    }
    assert_eq!(canonicalize(&out).as_ref(), Some(&out), "not canonical");
    let (Ok(mut expected), Ok(got)) = (
        serde_json::from_slice::<Value>(body),
        serde_json::from_slice::<Value>(&out),
    ) else {
        return;
    };
    let mut path = Vec::new();
    strip(&mut expected, &pointers, &mut path);
    assert_eq!(got, expected, "pointers {head:?}");
});

fn check_pointer(text: &str, pointer: &JsonPointer, body: &[u8]) {
    assert_eq!(pointer.to_string(), text);
    assert_eq!(text.parse::<JsonPointer>().as_ref(), Ok(pointer));
    assert_eq!(pointer.segments().len(), text.matches('/').count());
    let star = text.split('/').skip(1).any(|s| s == "*");
    assert_eq!(pointer.has_wildcard(), star);
    let found = string_at(body, pointer);
    if star {
        assert_eq!(found, Err(StringAtError::Wildcard));
        return;
    }
    // Against serde_json's own pointer lookup, on bodies without repeated members.
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    if canonicalize(body).is_none() {
        return;
    }
    let expected = match value.pointer(text) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(StringAtError::NotAString),
    };
    assert_eq!(found, expected, "pointer {text:?}");
}

/// One step of a path, owned.
enum Step {
    Member(String),
    Index(usize),
}

fn selects(pointer: &JsonPointer, path: &[Step]) -> bool {
    pointer.segments().len() == path.len()
        && pointer
            .segments()
            .iter()
            .zip(path)
            .all(|(s, step)| match (s, step) {
                (Segment::Any, _) => true,
                (Segment::Key(k), Step::Member(m)) => k == m,
                (s, Step::Index(i)) => s.index() == Some(*i),
            })
}

/// Removes from `value` (at `path`) every value below it a pointer selects.
fn strip(value: &mut Value, pointers: &[JsonPointer], path: &mut Vec<Step>) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                path.push(Step::Member(key.clone()));
                if pointers.iter().any(|p| selects(p, path)) {
                    map.remove(&key);
                } else if let Some(child) = map.get_mut(&key) {
                    strip(child, pointers, path);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            let mut kept = Vec::new();
            for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
                path.push(Step::Index(i));
                if !pointers.iter().any(|p| selects(p, path)) {
                    strip(&mut item, pointers, path);
                    kept.push(item);
                }
                path.pop();
            }
            *items = kept;
        }
        _ => {}
    }
}
