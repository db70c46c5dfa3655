//! The idempotency key read from a JSON body (`key_from = "json:..."`,
//! `idempotency::key::from_body`) on arbitrary pointers and bodies. Properties: never
//! panics; a key it reads is the string serde_json finds at the same pointer (on bodies
//! serde_json reads whole); a header with that key agrees with it and a header with
//! another key conflicts; without a key in the body, the header's key is the answer.
#![no_main]

use idemgate::config::JsonPointer;
use idemgate::idempotency::key::{self, from_body, KeyError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (pointer, body) = rest.split_at((n as usize).min(rest.len()));
    let Ok(pointer) = std::str::from_utf8(pointer) else {
        return;
    };
    let Ok(at) = pointer.parse::<JsonPointer>() else {
        return;
    };
    if at.has_wildcard() {
        return;
    }
    let header = |k: &str| key::parse(k.as_bytes(), 255).ok();
    match from_body(None, body, &at, 255) {
        Ok(Some(found)) => {
            // serde_json skips what is off the pointer's path unchecked (a string member
            // that is not UTF-8, say): compared on the bodies it reads whole.
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
                return;
            };
            assert_eq!(
                value.pointer(at.as_str()).and_then(|v| v.as_str()),
                Some(found.as_str()),
                "serde_json reads another value at {pointer}"
            );
            if let Some(same) = header(found.as_str()) {
                assert_eq!(
                    from_body(Some(same), body, &at, 255),
                    Ok(Some(found.clone()))
                );
            }
            let other = header(&format!("{}-other", found.as_str()).replace(' ', ""));
            if let Some(other) = other.filter(|o| o != &found) {
                assert!(matches!(
                    from_body(Some(other), body, &at, 255),
                    Err(KeyError::Conflict(_)) | Err(KeyError::Invalid(_))
                ));
            }
        }
        Ok(None) => {
            let h = header("from-header").unwrap();
            assert_eq!(from_body(Some(h.clone()), body, &at, 255), Ok(Some(h)));
        }
        Err(_) => {}
    }
});
