//! Hashes that identify a request: the record id of (scope, key), and the fingerprint
//! of what was asked. (The scope itself, and how ids are derived and written in hex:
//! [`super::scope`].)
//!
//! * **Record id** = SHA-256 of (scope, key), or HMAC-SHA-256 under the scope secret:
//!   the only form in which a key reaches Redis, Postgres or a log line.
//! * **Fingerprint** = SHA-256 of method, path and query, content type and body; a
//!   JSON body is canonicalised first (keys sorted, whitespace dropped).

use http::{HeaderValue, Method, Uri};
use sha2::{Digest, Sha256};

use super::canonical::canonicalize;
use super::key::IdempotencyKey;
use super::scope::{lower_hex, push_lower_hex, Scope, ScopeSecret};

/// Identity of one idempotency record: a hash of (scope, key).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordId([u8; 32]);

impl RecordId {
    /// The id of `key` in `scope`, keyed by `secret` when there is one.
    pub fn new(scope: Scope, key: &IdempotencyKey, secret: Option<&ScopeSecret>) -> Self {
        Self(scope.derive_record(key.as_str().as_bytes(), secret))
    }

    /// Full hex form, used in store keys.
    pub fn to_hex(self) -> String {
        lower_hex(&self.0)
    }

    /// Appends the full hex form to `out` (a store key being built).
    pub fn push_hex(self, out: &mut String) {
        push_lower_hex(out, &self.0);
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// From its full hex form (as in store keys).
    pub fn from_hex(hex_str: &str) -> Option<Self> {
        hex::decode(hex_str).ok()?.try_into().ok().map(Self)
    }

    /// From its 32 bytes (as Postgres' `key_hash` holds them).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// A 12-character prefix for log lines.
    pub fn short(self) -> String {
        lower_hex(&self.0[..6])
    }
}

impl std::fmt::Debug for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordId({})", self.short())
    }
}

/// What a keyed request asked for; a retry must carry the same fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn new(
        method: &Method,
        uri: &Uri,
        content_type: Option<&HeaderValue>,
        body: &[u8],
    ) -> Self {
        let mut h = Sha256::new();
        field(&mut h, method.as_str().as_bytes());
        let target = uri.path_and_query().map_or("/", |pq| pq.as_str());
        field(&mut h, target.as_bytes());
        let ct = content_type.map_or(&b""[..], HeaderValue::as_bytes);
        field(&mut h, ct);
        match is_json(ct).then(|| canonicalize(body)).flatten() {
            Some(canonical) => {
                h.update(b"json");
                field(&mut h, &canonical);
            }
            None => {
                h.update(b"raw");
                field(&mut h, body);
            }
        }
        Self(h.finalize().into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// From its 32 stored bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

/// A length-prefixed field, so that no two field sequences hash alike.
fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// `application/json` and any `+json` media type, parameters ignored.
fn is_json(content_type: &[u8]) -> bool {
    let Ok(ct) = std::str::from_utf8(content_type) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    // Compared as bytes: slicing the `str` 5 bytes from its end could split a character.
    let essence = essence.as_bytes();
    essence.eq_ignore_ascii_case(b"application/json")
        || essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_hex_is_what_hex_encode_writes() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(lower_hex(&bytes), hex::encode(&bytes));
        let id = RecordId([0xa5; 32]);
        let mut key = String::from("p:");
        id.push_hex(&mut key);
        assert_eq!(key, format!("p:{}", hex::encode([0xa5; 32])));
        assert_eq!(id.short(), "a5a5a5a5a5a5");
    }

    fn fp(ct: Option<&'static str>, body: &str) -> Fingerprint {
        let uri: Uri = "/v1/payments?x=1".parse().unwrap();
        let ct = ct.map(HeaderValue::from_static);
        Fingerprint::new(&Method::POST, &uri, ct.as_ref(), body.as_bytes())
    }

    const JSON: Option<&str> = Some("application/json");

    #[test]
    fn reordered_json_keys_and_whitespace_match() {
        assert_eq!(
            fp(JSON, r#"{"a":1,"b":2}"#),
            fp(JSON, r#"{ "b":2, "a":1 }"#)
        );
        assert_eq!(
            fp(
                Some("application/merge-patch+json; charset=utf-8"),
                r#"{"x":{"d":[1,2],"c":null}}"#
            ),
            fp(
                Some("application/merge-patch+json; charset=utf-8"),
                "{\"x\":{\"c\":null,\"d\":[1, 2]}}\n"
            ),
        );
    }

    #[test]
    fn different_values_or_order_of_arrays_differ() {
        assert_ne!(fp(JSON, r#"{"a":1}"#), fp(JSON, r#"{"a":2}"#));
        assert_ne!(fp(JSON, "[1,2]"), fp(JSON, "[2,1]"));
    }

    #[test]
    fn precision_and_repeated_keys_are_not_blurred() {
        assert_ne!(
            fp(JSON, r#"{"amount":18446744073709551617}"#),
            fp(JSON, r#"{"amount":18446744073709551616}"#)
        );
        assert_ne!(
            fp(JSON, r#"{"to":"alice","to":"bob"}"#),
            fp(JSON, r#"{"to":"bob"}"#)
        );
    }

    #[test]
    fn any_content_type_is_classified_without_panicking() {
        // Found by fuzz/canonical_json: the `+json` suffix was sliced at a byte offset
        // inside a multi-byte character (a client-chosen header: a panic per request).
        let body = r#"{"a":1}"#;
        for ct in [
            "x\u{e9}abcd",
            "\u{e9}\u{e9}\u{e9}",
            "a\u{20ac}json",
            "\u{7a4}\u{74f}&2",
        ] {
            let ct = HeaderValue::from_bytes(ct.as_bytes()).unwrap();
            let uri: Uri = "/v1/payments".parse().unwrap();
            Fingerprint::new(&Method::POST, &uri, Some(&ct), body.as_bytes());
            assert!(!is_json(ct.as_bytes()));
        }
        assert!(is_json("application/vnd.api+JSON; x=\u{e9}".as_bytes()));
    }

    #[test]
    fn non_json_bodies_are_compared_raw() {
        assert_ne!(
            fp(Some("text/plain"), "{\"a\":1,\"b\":2}"),
            fp(Some("text/plain"), "{\"b\":2,\"a\":1}")
        );
        assert_ne!(fp(JSON, "{not json"), fp(JSON, "{not  json"));
    }

    #[test]
    fn method_target_and_content_type_count() {
        let uri: Uri = "/v1/payments?x=1".parse().unwrap();
        let other: Uri = "/v1/payments?x=2".parse().unwrap();
        let a = Fingerprint::new(&Method::POST, &uri, None, b"");
        assert_ne!(a, Fingerprint::new(&Method::PATCH, &uri, None, b""));
        assert_ne!(a, Fingerprint::new(&Method::POST, &other, None, b""));
        assert_ne!(a, fp(Some("text/plain"), ""));
    }
}
