//! Phase 2, identify: whose key it is (the tenant scope, checked before the body is
//! read), the bounded body ([`super::body`]), the key when the route reads it from the
//! body, the record id of (scope, key) and the fingerprint of what was asked, under the
//! route's `fingerprint` policy (and under `fingerprint_previous` too when that differs,
//! for records stored before a change).

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http::request::Parts;
use http::HeaderName;

use super::admit::Admitted;
use super::body;
use super::refused::Refused;
use crate::app::App;
use crate::config::{AnonymousScope, IdempotencyConfig, KeyFrom};
use crate::idempotency::{
    key, Fingerprint, IdempotencyKey, KeyError, RecordId, Scope, ScopeError, ScopeSecret,
};
use crate::route::Route;

/// A keyed request, identified: what the claim and the upstream call need.
pub struct Identified {
    pub parts: Parts,
    pub body: Bytes,
    pub key: IdempotencyKey,
    pub scope: Scope,
    pub record: RecordId,
    pub fingerprint: Fingerprint,
    /// The fingerprint under the route's `fingerprint_previous` policy, when it differs:
    /// a record stored before the policy changed is matched under it ([`super::claim`]).
    pub previous: Option<Fingerprint>,
}

/// What identifying a request came to.
pub enum Identity {
    Keyed(Identified),
    /// Its key was to be read from the body, which has none, on a route that does not
    /// require one: forwarded unkeyed (the body read, so buffered).
    Unkeyed(Request),
}

/// The scope, the body, the key (when the route reads it from the body), the record id
/// and the fingerprint of a keyed request.
pub async fn identify(
    app: &App,
    route: &Route,
    admitted: Admitted,
    request: Request,
) -> Result<Identity, Refused> {
    let secret = app.scope_keys.current.as_ref();
    let scope = scope_of(route, request.headers(), secret)?;
    let (parts, body) = request.into_parts();
    let body = body::read_bounded(&app.config.server, &parts, body).await?;
    let key = match admitted {
        Admitted::Key(key) => key,
        Admitted::InBody(header) => match key_in_body(route, header, &body)? {
            Some(key) => key,
            None => {
                return Ok(Identity::Unkeyed(Request::from_parts(
                    parts,
                    Body::from(body),
                )))
            }
        },
    };
    let record = RecordId::new(scope, &key, secret);
    let (fingerprint, previous) = fingerprints(&route.policy.settings, &parts, &body);
    Ok(Identity::Keyed(Identified {
        parts,
        body,
        key,
        scope,
        record,
        fingerprint,
        previous,
    }))
}

/// The key of a route with `key_from = "json:..."`; `None`: none, and none required.
fn key_in_body(
    route: &Route,
    header: Option<IdempotencyKey>,
    body: &[u8],
) -> Result<Option<IdempotencyKey>, KeyError> {
    let settings = &route.policy.settings;
    let KeyFrom::Json(at) = &settings.key_from else {
        return Ok(header);
    };
    match key::from_body(header, body, at, settings.max_key_length)? {
        None if settings.required => Err(KeyError::NotInBody(at.to_string())),
        key => Ok(key),
    }
}

/// The request's fingerprint under the route's `fingerprint`, and under
/// `fingerprint_previous` when that policy differs (else nothing more is hashed).
fn fingerprints(
    settings: &IdempotencyConfig,
    parts: &Parts,
    body: &[u8],
) -> (Fingerprint, Option<Fingerprint>) {
    let under = |policy| Fingerprint::new(policy, &parts.method, &parts.uri, &parts.headers, body);
    let previous = (settings.fingerprint_previous != settings.fingerprint)
        .then(|| under(&settings.fingerprint_previous));
    (under(&settings.fingerprint), previous)
}

/// The request's tenant scope under `secret`, or why it has none.
pub fn scope_of(
    route: &Route,
    headers: &http::HeaderMap,
    secret: Option<&ScopeSecret>,
) -> Result<Scope, ScopeError> {
    let names = &route.policy.settings.scope_headers;
    match Scope::from_headers(&route.name, headers, names, secret)? {
        Some(scope) => Ok(scope),
        None if route.policy.settings.anonymous == AnonymousScope::Shared => {
            Ok(Scope::anonymous(&route.name, names, secret))
        }
        None => Err(ScopeError::Missing(
            names
                .iter()
                .map(HeaderName::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_fingerprint_only_when_the_policies_differ() {
        let request = http::Request::post("/v1/p")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let body = br#"{"amount":1,"ts":2}"#;
        let mut settings = IdempotencyConfig::default();
        let (today, previous) = fingerprints(&settings, &parts, body);
        assert_eq!(previous, None);

        settings.fingerprint.ignore_json = vec!["/ts".parse().unwrap()];
        let (now, previous) = fingerprints(&settings, &parts, body);
        assert_ne!(now, today);
        assert_eq!(
            previous,
            Some(today),
            "the default policy's, as stored before"
        );

        settings.fingerprint_previous = settings.fingerprint.clone();
        assert_eq!(fingerprints(&settings, &parts, body), (now, None));
    }
}
