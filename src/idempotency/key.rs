//! The idempotency key: where it is read from (the `Idempotency-Key` request header, or
//! a string in the JSON body: [`from_body`]) and what a valid key is.
//!
//! A header key is accepted as a bare token (`abc-123`) or in the RFC 8941 sf-string
//! form (`"abc-123"`, with `\"` and `\\` escapes); a body key is the JSON string as it
//! is. The key must be 1 to `max_key_length` visible ASCII characters. The raw key is
//! never logged; use the record's hash (see [`super::fingerprint::RecordId`]).

use http::{HeaderMap, HeaderName};

use super::pointer::{self, JsonPointer, StringAtError};

/// A validated idempotency key, as the client meant it (sf-string quotes removed).
#[derive(Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys can be secrets-by-accident (customer ids, emails): never print them.
        f.write_str("IdempotencyKey(..)")
    }
}

/// Why a request's key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the `{0}` header is required on this route")]
    Missing(String),
    #[error("the idempotency key {0}")]
    Invalid(&'static str),
    /// The body has no string key at the route's pointer (named) where one is needed,
    /// or holds something other than one string there.
    #[error("the JSON body has no idempotency key at `{0}` (a string, named once)")]
    NotInBody(String),
    /// The header and the body (at the pointer named) carry different keys.
    #[error("the idempotency key header and the body's `{0}` name different keys")]
    Conflict(String),
}

/// Reads the key from the first of `names` present in `headers`.
///
/// `Ok(None)` means no key header at all; the caller decides whether that is allowed.
pub fn extract(
    headers: &HeaderMap,
    names: &[HeaderName],
    max_len: usize,
) -> Result<Option<IdempotencyKey>, KeyError> {
    for name in names {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            continue;
        };
        if values.next().is_some() {
            return Err(KeyError::Invalid("header must appear only once"));
        }
        return parse(value.as_bytes(), max_len).map(Some);
    }
    Ok(None)
}

/// Parses one header value into a key.
pub fn parse(raw: &[u8], max_len: usize) -> Result<IdempotencyKey, KeyError> {
    // Optional whitespace is SP and HTAB (RFC 9110 5.6.3); anything else stays, and is
    // refused below as not visible.
    let raw = trim_ows(raw);
    let key = if raw.first() == Some(&b'"') {
        decode_sf_string(raw)?
    } else {
        raw.to_vec()
    };
    validate(key, max_len)
}

/// The key of a request whose route reads it from the JSON body at `at`
/// (`key_from = "json:..."`): the header's key (`header`, already parsed) when there is
/// one, refused if the body names another; else the body's. `Ok(None)`: no key anywhere
/// (the caller decides, as for a missing header). A body that is not JSON has no key in
/// it; a value that is not one string is refused.
pub fn from_body(
    header: Option<IdempotencyKey>,
    body: &[u8],
    at: &JsonPointer,
    max_len: usize,
) -> Result<Option<IdempotencyKey>, KeyError> {
    let in_body = match pointer::string_at(body, at) {
        Ok(Some(value)) => Some(validate(value.into_bytes(), max_len)?),
        Ok(None) | Err(StringAtError::NotJson) => None,
        Err(_) => return Err(KeyError::NotInBody(at.to_string())),
    };
    match (header, in_body) {
        (Some(header), Some(body)) if header != body => Err(KeyError::Conflict(at.to_string())),
        (Some(key), _) | (None, Some(key)) => Ok(Some(key)),
        (None, None) => Ok(None),
    }
}

/// The rules every key meets, wherever it was read.
fn validate(key: Vec<u8>, max_len: usize) -> Result<IdempotencyKey, KeyError> {
    if key.is_empty() {
        return Err(KeyError::Invalid("must not be empty"));
    }
    if key.len() > max_len {
        return Err(KeyError::Invalid("is longer than the maximum key length"));
    }
    if !key.iter().all(|b| b.is_ascii_graphic()) {
        return Err(KeyError::Invalid(
            "must consist of visible ASCII characters only",
        ));
    }
    // Only visible ASCII remains, so this cannot fail.
    String::from_utf8(key)
        .map(IdempotencyKey)
        .map_err(|_| KeyError::Invalid("must consist of visible ASCII characters only"))
}

fn trim_ows(mut raw: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = raw {
        raw = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = raw {
        raw = rest;
    }
    raw
}

/// Decodes an RFC 8941 sf-string (`"..."`) into its characters.
fn decode_sf_string(raw: &[u8]) -> Result<Vec<u8>, KeyError> {
    const MALFORMED: KeyError = KeyError::Invalid("is a malformed structured-field string");
    if raw.len() < 2 || raw[raw.len() - 1] != b'"' {
        return Err(MALFORMED);
    }
    let inner = &raw[1..raw.len() - 1];
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => return Err(MALFORMED),
            },
            b'"' => return Err(MALFORMED),
            0x20..=0x7e => out.push(b),
            _ => return Err(MALFORMED),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ok(raw: &str) -> String {
        parse(raw.as_bytes(), 255).unwrap().as_str().to_string()
    }

    fn bad(raw: &[u8]) -> KeyError {
        parse(raw, 16).unwrap_err()
    }

    #[test]
    fn bare_tokens_and_sf_strings_mean_the_same_key() {
        assert_eq!(ok("abc-123"), "abc-123");
        assert_eq!(ok("\"abc-123\""), "abc-123");
        assert_eq!(ok(" abc "), "abc");
        assert_eq!(ok(r#""a\"b\\c""#), r#"a"b\c"#);
    }

    #[test]
    fn refuses_what_the_issue_lists() {
        assert_eq!(bad(b""), KeyError::Invalid("must not be empty"));
        assert_eq!(bad(b"\"\""), KeyError::Invalid("must not be empty"));
        assert!(matches!(bad(b"0123456789abcdefX"), KeyError::Invalid(m) if m.contains("longer")));
        assert!(matches!(bad(b"a b"), KeyError::Invalid(m) if m.contains("visible")));
        assert!(
            matches!(bad("caf\u{e9}".as_bytes()), KeyError::Invalid(m) if m.contains("visible"))
        );
        for malformed in [&b"\"abc"[..], b"\"a\"b\"", b"\"a\\nb\"", b"\"", b"\"a\tb\""] {
            assert!(
                matches!(bad(malformed), KeyError::Invalid(m) if m.contains("malformed")),
                "{:?}",
                String::from_utf8_lossy(malformed)
            );
        }
    }

    #[test]
    fn length_is_counted_after_decoding() {
        assert!(parse(b"\"0123456789abcdef\"", 16).is_ok());
    }

    #[test]
    fn reads_the_header_then_the_aliases() {
        let names = [
            HeaderName::from_static("idempotency-key"),
            HeaderName::from_static("x-idempotency-key"),
        ];
        let mut h = HeaderMap::new();
        assert_eq!(extract(&h, &names, 255), Ok(None));
        h.insert("x-idempotency-key", HeaderValue::from_static("alias"));
        assert_eq!(extract(&h, &names, 255).unwrap().unwrap().as_str(), "alias");
        h.insert("idempotency-key", HeaderValue::from_static("main"));
        assert_eq!(extract(&h, &names, 255).unwrap().unwrap().as_str(), "main");
        h.append("idempotency-key", HeaderValue::from_static("again"));
        assert!(extract(&h, &names, 255).is_err());
    }

    #[test]
    fn a_body_key_is_read_at_its_pointer_and_the_header_wins_if_it_agrees() {
        let at: JsonPointer = "/meta/key".parse().unwrap();
        let body = br#"{"amount":1,"meta":{"key":"order-42"}}"#;
        let key = |s: &str| parse(s.as_bytes(), 255).unwrap();
        let read = |header: Option<&str>, body: &[u8]| from_body(header.map(key), body, &at, 255);
        assert_eq!(read(None, body).unwrap().unwrap().as_str(), "order-42");
        assert_eq!(
            read(Some("order-42"), body).unwrap().unwrap().as_str(),
            "order-42"
        );
        assert_eq!(
            read(Some("other"), body),
            Err(KeyError::Conflict("/meta/key".into()))
        );
        assert_eq!(read(Some("h"), b"{}").unwrap().unwrap().as_str(), "h");
        assert_eq!(read(None, b"{\"meta\":{}}"), Ok(None));
        assert_eq!(
            read(None, b"{\"meta\":{\"key\":null}}"),
            Ok(None),
            "null is no key"
        );
        let null = br#"{"meta":{"key":null}}"#;
        assert_eq!(read(Some("h"), null).unwrap().unwrap().as_str(), "h");
        assert_eq!(read(None, b"not json"), Ok(None));
        for bad in [
            &br#"{"meta":{"key":7}}"#[..],
            br#"{"meta":{"key":"a","key":"b"}}"#,
        ] {
            assert_eq!(
                read(None, bad),
                Err(KeyError::NotInBody("/meta/key".into()))
            );
        }
        // The rules of a header key: visible ASCII, not empty, not too long; no
        // sf-string decoding of a body key.
        assert!(read(None, br#"{"meta":{"key":"a b"}}"#).is_err());
        assert!(read(None, br#"{"meta":{"key":""}}"#).is_err());
        assert!(from_body(None, br#"{"meta":{"key":"abcdef"}}"#, &at, 5).is_err());
        let quoted = read(None, br#"{"meta":{"key":"\"x\""}}"#).unwrap().unwrap();
        assert_eq!(quoted.as_str(), "\"x\"");
    }
}
