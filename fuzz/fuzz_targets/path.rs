//! Request targets (`route::path::canonicalize`), as hyper hands them over (`Uri`).
//! Properties: never panics; idempotent (a canonical path is accepted unchanged); a
//! refused target is left as it was; an accepted one keeps its scheme, authority and
//! query, means the same path (equal once every escape is decoded), and holds no dot
//! segment (literal or percent-encoded, also before a `;`), no empty segment but a
//! trailing one, no `\` and no encoded `/` or `\`, no bad `%` escape and no escape of an
//! unreserved character (those are decoded).
#![no_main]

use http::Uri;
use idemgate::fuzzing::path::canonicalize;
use idemgate_fuzz::percent_decode;
use libfuzzer_sys::fuzz_target;

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn check_canonical(path: &str) {
    let bytes = path.as_bytes();
    assert!(path.starts_with('/'), "{path:?}");
    assert!(!path.contains('\\'), "{path:?}");
    for (i, _) in path.match_indices('%') {
        let hex = bytes.get(i + 1..i + 3).expect("escape cut short");
        let hex = std::str::from_utf8(hex).expect("escape is ASCII");
        let b = u8::from_str_radix(hex, 16).expect("escape is two hex digits");
        assert!(b != b'/' && b != b'\\', "encoded separator in {path:?}");
        assert!(!unreserved(b), "escaped unreserved character in {path:?}");
    }
    let segments: Vec<&[u8]> = bytes[1..].split(|b| *b == b'/').collect();
    for (i, segment) in segments.iter().enumerate() {
        let name = segment.split(|b| *b == b';').next().unwrap_or_default();
        let name = percent_decode(name);
        assert!(name != b"." && name != b"..", "dot segment in {path:?}");
        assert!(
            !segment.is_empty() || i + 1 == segments.len(),
            "empty segment in {path:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut uri) = Uri::try_from(data) else {
        return;
    };
    let before = uri.clone();
    if canonicalize(&mut uri).is_err() {
        assert_eq!(uri, before, "a refused target was changed");
        return;
    }
    check_canonical(uri.path());
    assert_eq!(uri.scheme(), before.scheme());
    assert_eq!(uri.authority(), before.authority());
    assert_eq!(uri.query(), before.query());
    assert_eq!(
        percent_decode(uri.path().as_bytes()),
        percent_decode(before.path().as_bytes()),
        "the canonical path means another path"
    );
    let mut again = uri.clone();
    assert_eq!(
        canonicalize(&mut again),
        Ok(()),
        "{uri} refused the second time"
    );
    assert_eq!(again, uri, "not idempotent");
});
