//! Tenant scope: which tenant (and route) an idempotency key belongs to, the server
//! secret that keys every id derived from it, and the lower-case hex ids are written in.
//!
//! * A request's scope is built from the route name and the values of the route's
//!   `scope_headers` (each absent, or present exactly once). A request that carries none
//!   of them is *anonymous*: refused with 400 `idempotency_scope_missing` unless the route
//!   says `anonymous = "shared"`, because anonymous callers would share one scope and so
//!   each other's stored responses.
//! * With `idempotency.scope_secret_file`, scope and record ids are HMAC-SHA-256 under
//!   that secret, so the hashes in logs and in Postgres cannot be reversed offline into
//!   a tenant's `Authorization` value or a key. Without one they are plain SHA-256, as
//!   before the secret existed (the same bytes, so an upgrade finds its records).
//! * [`ScopeKeys::previous`] is the derivation in force before the current one: while it
//!   is set, a new key is also looked up under its previous id, so records written before
//!   a secret was introduced are still found (for one `ttl`, then drop it).

use std::sync::Arc;

use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};

/// Which tenant (and route) a key belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Scope(pub(super) [u8; 32]);

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scope({})", hex::encode(&self.0[..6]))
    }
}

/// Why a request has no usable scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// None of the scope headers is present and the route does not share anonymous scope.
    #[error("none of the tenant headers ({0}) is present on this keyed request")]
    Missing(String),
    /// A scope header appears more than once: which tenant is meant is ambiguous.
    #[error("the `{0}` header must appear only once")]
    Duplicated(HeaderName),
}

/// A server secret that keys scope and record ids (at least 16 bytes).
#[derive(Clone)]
pub struct ScopeSecret(Arc<[u8]>);

impl std::fmt::Debug for ScopeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScopeSecret(..)")
    }
}

impl ScopeSecret {
    /// From the contents of a secret file (surrounding whitespace ignored).
    pub fn from_file_contents(bytes: &[u8]) -> Result<Self, &'static str> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < 16 {
            return Err(
                "the secret must be at least 16 bytes (for example `openssl rand -base64 32`)",
            );
        }
        Ok(Self(trimmed.into()))
    }
}

/// How ids are derived now, and how they were derived before (for lookups during an
/// upgrade). `None` is the unkeyed (plain SHA-256) derivation.
#[derive(Debug, Clone, Default)]
pub struct ScopeKeys {
    pub current: Option<ScopeSecret>,
    /// `Some(derivation)` while records under the previous derivation must still be found.
    pub previous: Option<Option<ScopeSecret>>,
}

/// A SHA-256, or an HMAC-SHA-256 under a secret.
enum Hasher {
    Plain(Sha256),
    Keyed(Hmac<Sha256>),
}

impl Hasher {
    fn new(secret: Option<&ScopeSecret>) -> Self {
        match secret.and_then(|s| Hmac::<Sha256>::new_from_slice(&s.0).ok()) {
            Some(mac) => Self::Keyed(mac),
            None => Self::Plain(Sha256::new()),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::Plain(h) => h.update(bytes),
            Self::Keyed(m) => m.update(bytes),
        }
    }

    /// A length-prefixed field, so that no two field sequences hash alike.
    fn field(&mut self, bytes: &[u8]) {
        self.update(&(bytes.len() as u64).to_be_bytes());
        self.update(bytes);
    }

    fn finish(self) -> [u8; 32] {
        match self {
            Self::Plain(h) => h.finalize().into(),
            Self::Keyed(m) => m.finalize().into_bytes().into(),
        }
    }
}

impl Scope {
    /// The scope of a request on `route` from its `names` headers.
    ///
    /// `Ok(None)`: none is present (anonymous); the caller applies the route's policy.
    pub fn from_headers(
        route: &str,
        headers: &HeaderMap,
        names: &[HeaderName],
        secret: Option<&ScopeSecret>,
    ) -> Result<Option<Self>, ScopeError> {
        let mut h = Hasher::new(secret);
        h.field(route.as_bytes());
        let mut present = false;
        for name in names {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (None, _) => h.update(&[0]),
                (Some(value), None) => {
                    present = true;
                    h.update(&[1]);
                    h.field(value.as_bytes());
                }
                (Some(_), Some(_)) => return Err(ScopeError::Duplicated(name.clone())),
            }
        }
        Ok(present.then(|| Self(h.finish())))
    }

    /// The one scope that anonymous callers share on `route` (`anonymous = "shared"`).
    pub fn anonymous(route: &str, names: &[HeaderName], secret: Option<&ScopeSecret>) -> Self {
        let mut h = Hasher::new(secret);
        h.field(route.as_bytes());
        for _ in names {
            h.update(&[0]);
        }
        Self(h.finish())
    }

    pub fn to_hex(self) -> String {
        lower_hex(&self.0)
    }

    /// From the hex form that log lines carry as `scope_hash`.
    pub fn from_hex(hex_str: &str) -> Option<Self> {
        let bytes = hex::decode(hex_str).ok()?;
        bytes.try_into().ok().map(Self)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// From its 32 bytes (as Postgres' `scope` holds them).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The id of `key` in this scope (see [`super::RecordId::new`]).
    pub(super) fn derive_record(self, key: &[u8], secret: Option<&ScopeSecret>) -> [u8; 32] {
        let mut h = Hasher::new(secret);
        h.update(&self.0);
        h.field(key);
        h.finish()
    }
}

/// Lower-case hex, as `hex::encode` writes it, without its per-character iterator
/// (ids are written in hex on every request: store keys, log lines).
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_lower_hex(&mut out, bytes);
    out
}

pub(super) fn push_lower_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const AUTH: HeaderName = http::header::AUTHORIZATION;
    const TENANT: HeaderName = HeaderName::from_static("x-tenant-id");

    fn headers(pairs: &[(&HeaderName, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append((*name).clone(), HeaderValue::from_static(value));
        }
        map
    }

    fn scope(pairs: &[(&HeaderName, &'static str)], names: &[HeaderName]) -> Option<Scope> {
        Scope::from_headers("payments", &headers(pairs), names, None).unwrap()
    }

    #[test]
    fn scopes_separate_tenants_routes_and_anonymous() {
        let names = [AUTH];
        let one = scope(&[(&AUTH, "Bearer one")], &names).unwrap();
        assert_eq!(Some(one), scope(&[(&AUTH, "Bearer one")], &names));
        assert_ne!(Some(one), scope(&[(&AUTH, "Bearer two")], &names));
        let other_route =
            Scope::from_headers("refunds", &headers(&[(&AUTH, "Bearer one")]), &names, None);
        assert_ne!(Some(one), other_route.unwrap());
        assert_eq!(scope(&[], &names), None, "no header: anonymous");
        let literal = scope(&[(&AUTH, "anonymous")], &names).unwrap();
        assert_ne!(Scope::anonymous("payments", &names, None), literal);
    }

    #[test]
    fn several_headers_make_one_scope_and_each_counts() {
        let names = [TENANT, AUTH];
        let both = scope(&[(&TENANT, "t1"), (&AUTH, "a")], &names).unwrap();
        let tenant_only = scope(&[(&TENANT, "t1")], &names).unwrap();
        let auth_only = scope(&[(&AUTH, "t1")], &names).unwrap();
        assert_ne!(both, tenant_only);
        assert_ne!(
            tenant_only, auth_only,
            "which header carried the value counts"
        );
    }

    #[test]
    fn a_duplicated_scope_header_is_refused() {
        let map = headers(&[(&AUTH, "a"), (&AUTH, "b")]);
        assert_eq!(
            Scope::from_headers("payments", &map, &[AUTH], None),
            Err(ScopeError::Duplicated(AUTH))
        );
    }

    #[test]
    fn a_secret_changes_every_id_and_the_unkeyed_form_is_the_legacy_one() {
        let secret = ScopeSecret::from_file_contents(b"0123456789abcdef0123\n").unwrap();
        let map = headers(&[(&AUTH, "Bearer one")]);
        let plain = Scope::from_headers("payments", &map, &[AUTH], None).unwrap();
        let keyed = Scope::from_headers("payments", &map, &[AUTH], Some(&secret)).unwrap();
        assert_ne!(plain, keyed);
        // The layout before scopes had several headers: SHA-256(field(route), 1, field(value)).
        let mut legacy = Sha256::new();
        legacy.update(8u64.to_be_bytes());
        legacy.update(b"payments");
        legacy.update([1]);
        legacy.update(10u64.to_be_bytes());
        legacy.update(b"Bearer one");
        assert_eq!(plain.unwrap().0, <[u8; 32]>::from(legacy.finalize()));
        assert!(ScopeSecret::from_file_contents(b"short").is_err());
    }
}
