//! Hashes that identify a request: the record id of (scope, key), and the fingerprint
//! of what was asked. (The scope itself, and how ids are derived and written in hex:
//! [`super::scope`].)
//!
//! * **Record id** = SHA-256 of (scope, key), or HMAC-SHA-256 under the scope secret:
//!   the only form in which a key reaches Redis, Postgres or a log line.
//! * **Fingerprint** = SHA-256 of method, path and query, content type (and a gRPC
//!   call's `grpc-encoding`) and body; a JSON body is canonicalised first (keys sorted, whitespace dropped), all as the
//!   route's [`FingerprintPolicy`] says: values left out of a JSON body, headers added,
//!   the body as bytes or not at all, the query's parameters sorted. Each part is
//!   length-prefixed and each option adds its own tag, so under the default policy the
//!   hash is the one earlier releases computed (records they stored keep matching).

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use sha2::{Digest, Sha256};

use super::canonical::canonicalize_ignoring;
use super::key::IdempotencyKey;
use super::scope::{lower_hex, push_lower_hex, Scope, ScopeSecret};
use crate::config::{BodyMode, FingerprintPolicy, QueryMode};
use crate::proxy::headers::is_grpc;

const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

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
    /// The fingerprint of a request under `policy` (the content type is read from
    /// `headers`).
    pub fn new(
        policy: &FingerprintPolicy,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Self {
        let mut h = Sha256::new();
        if *policy != FingerprintPolicy::default() {
            tag(&mut h, policy);
        }
        field(&mut h, method.as_str().as_bytes());
        let target = uri.path_and_query().map_or("/", |pq| pq.as_str());
        match (policy.query, uri.query()) {
            (QueryMode::Sorted, Some(query)) => {
                field(&mut h, sorted_target(uri.path(), query).as_bytes());
            }
            _ => field(&mut h, target.as_bytes()),
        }
        let ct = headers
            .get(CONTENT_TYPE)
            .map_or(&b""[..], HeaderValue::as_bytes);
        field(&mut h, ct);
        grpc_encoding(&mut h, headers);
        let json = || is_json(ct).then(|| canonicalize_ignoring(body, &policy.ignore_json));
        match policy.body {
            BodyMode::CanonicalJson => match json().flatten() {
                Some(canonical) => {
                    h.update(b"json");
                    field(&mut h, &canonical);
                }
                None => raw(&mut h, body),
            },
            BodyMode::Bytes => raw(&mut h, body),
            BodyMode::None => h.update(b"none"),
        }
        if !policy.headers.is_empty() {
            h.update(b"headers");
            for name in &policy.headers {
                field(&mut h, name.as_str().as_bytes());
                let values = headers.get_all(name);
                h.update((values.iter().count() as u64).to_be_bytes());
                for value in values {
                    field(&mut h, trim_ows(value.as_bytes()));
                }
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

/// The policy itself, first in the hash of every policy but the default (whose hashes
/// are those of earlier releases): two policies never give two different requests one
/// fingerprint (say `{"a":1,"x":2}` with `/x` ignored, and `{"a":1,"y":3}` with `/y`),
/// so a record stored under one policy matches, under another, only a request that it
/// matches under its own.
fn tag(h: &mut Sha256, policy: &FingerprintPolicy) {
    h.update(b"policy");
    let body: u8 = match policy.body {
        BodyMode::CanonicalJson => 0,
        BodyMode::Bytes => 1,
        BodyMode::None => 2,
    };
    let query: u8 = match policy.query {
        QueryMode::Exact => 0,
        QueryMode::Sorted => 1,
    };
    h.update([body, query]);
    h.update((policy.ignore_json.len() as u64).to_be_bytes());
    for pointer in &policy.ignore_json {
        field(h, pointer.as_str().as_bytes());
    }
    h.update((policy.headers.len() as u64).to_be_bytes());
    for name in &policy.headers {
        field(h, name.as_str().as_bytes());
    }
}

/// A gRPC call's `grpc-encoding`, the compression its messages' bytes are in (the same
/// bytes under `gzip` and `deflate` are two messages): hashed when the call names one
/// other than `identity`, which is what its absence means (so the fingerprint of a call
/// without compression is the one earlier releases computed).
fn grpc_encoding(h: &mut Sha256, headers: &HeaderMap) {
    if !is_grpc(headers) {
        return;
    }
    match headers.get(GRPC_ENCODING).map(|v| trim_ows(v.as_bytes())) {
        None | Some(b"identity") => {}
        Some(encoding) => {
            h.update(b"grpc-encoding");
            field(h, encoding);
        }
    }
}

/// A body hashed as its bytes.
fn raw(h: &mut Sha256, body: &[u8]) {
    h.update(b"raw");
    field(h, body);
}

/// `path?query` with the query's `&`-separated parameters sorted by their raw text.
fn sorted_target(path: &str, query: &str) -> String {
    let mut params: Vec<&str> = query.split('&').collect();
    params.sort_unstable();
    format!("{path}?{}", params.join("&"))
}

/// A header value without the spaces and tabs around it (RFC 9110 OWS).
fn trim_ows(value: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &value[start..end]
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
mod tests;
