//! The `Idempotency-Key` decoder (`idempotency::key`): bare tokens and RFC 8941
//! sf-strings, after trimming optional whitespace.

use idemgate::idempotency::key::parse;
use proptest::prelude::*;

use crate::cases;

/// `key` as an RFC 8941 sf-string.
fn sf(key: &str) -> String {
    let mut out = String::from("\"");
    for c in key.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// What the decoder should answer, written from the specs: optional whitespace is SP
/// and HTAB (RFC 9110 5.6.3), an sf-string is RFC 8941 4.2.5, and a key is 1 to `max`
/// visible ASCII characters. `None` when refused.
fn model(raw: &[u8], max: usize) -> Option<String> {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !ows(b)).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    let raw = &raw[start..end];
    let key = if raw.first() == Some(&b'"') {
        let mut out = Vec::new();
        let mut i = 1;
        loop {
            match *raw.get(i)? {
                b'\\' => match *raw.get(i + 1)? {
                    c @ (b'"' | b'\\') => {
                        out.push(c);
                        i += 2;
                    }
                    _ => return None,
                },
                b'"' if i + 1 == raw.len() => break,
                c @ (0x20..=0x21 | 0x23..=0x5b | 0x5d..=0x7e) => {
                    out.push(c);
                    i += 1;
                }
                _ => return None,
            }
        }
        out
    } else {
        raw.to_vec()
    };
    let valid = !key.is_empty() && key.len() <= max && key.iter().all(u8::is_ascii_graphic);
    valid.then(|| String::from_utf8(key).unwrap())
}

fn decoded(raw: &[u8], max: usize) -> Option<String> {
    parse(raw, max).ok().map(|k| k.as_str().to_string())
}

/// Short inputs weighted towards the bytes the decoder treats specially.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => b'a'..=b'c',
        2 => prop::sample::select(&b" \t\"\\!~"[..]),
        1 => prop::sample::select(&b"\x7f\n\r\x0b\x0c\x00\xe9"[..]),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..12)
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn a_bare_key_decodes_to_itself(
        key in "[!#-~][!-~]{0,39}", lead in "[ \t]{0,2}", trail in "[ \t]{0,2}",
    ) {
        prop_assert_eq!(decoded(format!("{lead}{key}{trail}").as_bytes(), 255), Some(key));
    }

    #[test]
    fn an_sf_string_decodes_to_its_key(
        key in "[!-~]{1,40}", lead in "[ \t]{0,2}", trail in "[ \t]{0,2}",
    ) {
        let raw = format!("{lead}{}{trail}", sf(&key));
        prop_assert_eq!(decoded(raw.as_bytes(), 255), Some(key));
    }

    #[test]
    fn length_is_counted_after_decoding(key in "[!-~]{1,40}", max in 0usize..48) {
        let fits = key.len() <= max;
        prop_assert_eq!(parse(sf(&key).as_bytes(), max).is_ok(), fits);
        if !key.starts_with('"') {
            prop_assert_eq!(parse(key.as_bytes(), max).is_ok(), fits);
        }
    }

    #[test]
    fn decoding_follows_the_rfcs(raw in header_bytes(), max in 0usize..16) {
        let shown = String::from_utf8_lossy(&raw).into_owned();
        prop_assert_eq!(decoded(&raw, max), model(&raw, max), "{:?}", shown);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_only_valid_keys_pass(
        raw in prop::collection::vec(any::<u8>(), 0..300), max in 0usize..300,
    ) {
        if let Ok(k) = parse(&raw, max) {
            let k = k.as_str();
            prop_assert!(!k.is_empty() && k.len() <= max);
            prop_assert!(k.bytes().all(|b| b.is_ascii_graphic()));
        }
    }
}

/// Corpus, from `decoding_follows_the_rfcs` (minimal input `"a\n"`, max 1): the decoder
/// trimmed every ASCII whitespace byte, not only SP and HTAB, so a key with a line feed,
/// carriage return or form feed around it (say `/admin/keys/payments/abc%0A`) was taken
/// for the key without them.
#[test]
fn corpus_only_sp_and_htab_are_optional_whitespace() {
    assert_eq!(decoded(b"a\n", 1), None);
    for raw in [&b"\nabc"[..], b"abc\r", b"\x0cabc", b"\"abc\"\r\n"] {
        assert_eq!(decoded(raw, 16), None, "{:?}", String::from_utf8_lossy(raw));
    }
    assert_eq!(decoded(b" \tabc\t ", 16).as_deref(), Some("abc"));
    assert_eq!(decoded(b"\t\"abc\" ", 16).as_deref(), Some("abc"));
}
