//! `Idempotency-Key` header values (`idempotency::key::parse`). Properties: never
//! panics; an accepted key is 1 to `max_len` visible ASCII characters; the key's
//! bare token form (when it has one), its RFC 8941 sf-string form, and either with
//! optional whitespace around it parse to the same key; a value that is a valid bare
//! token is never refused. The first input byte picks `max_len` (1 to 256).
#![no_main]

use idemgate::idempotency::key::parse;
use libfuzzer_sys::fuzz_target;

fn sf_string(key: &str) -> String {
    let mut out = String::from("\"");
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn trim_ows(raw: &[u8]) -> &[u8] {
    let start = raw.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = raw.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    match (start, end) {
        (Some(s), Some(e)) => &raw[s..=e],
        _ => &[],
    }
}

fuzz_target!(|data: &[u8]| {
    let (max_len, raw) = match data.split_first() {
        Some((&first, rest)) => (usize::from(first) + 1, rest),
        None => return,
    };
    let trimmed = trim_ows(raw);
    match parse(raw, max_len) {
        Ok(key) => {
            let k = key.as_str();
            assert!(!k.is_empty() && k.len() <= max_len, "length {}", k.len());
            assert!(k.bytes().all(|b| b.is_ascii_graphic()), "{k:?}");
            let sf = sf_string(k);
            assert_eq!(parse(sf.as_bytes(), max_len).unwrap().as_str(), k);
            let spaced = format!(" \t{sf}\t ");
            assert_eq!(parse(spaced.as_bytes(), max_len).unwrap().as_str(), k);
            if !k.starts_with('"') {
                assert_eq!(parse(k.as_bytes(), max_len).unwrap().as_str(), k);
                let spaced = format!("\t {k} \t");
                assert_eq!(parse(spaced.as_bytes(), max_len).unwrap().as_str(), k);
            }
        }
        Err(_) => {
            let bare_token = trimmed.first() != Some(&b'"')
                && (1..=max_len).contains(&trimmed.len())
                && trimmed.iter().all(u8::is_ascii_graphic);
            assert!(!bare_token, "a valid bare token was refused: {trimmed:?}");
        }
    }
});
