//! Phase 2, identify: whose key it is (the tenant scope, checked before the body is
//! read), the bounded body ([`super::body`]), the key when the route reads it from the
//! body, the record id of (scope, key) and the fingerprint of what was asked, under the
//! route's `fingerprint` policy (under `fingerprint_previous` only when a record does
//! not match: [`Identified::previous`]).

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http::request::Parts;
use http::HeaderName;

use super::admit::Admitted;
use super::body;
use super::refused::Refused;
use crate::app::App;
use crate::config::{AnonymousScope, KeyFrom};
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
    let policy = &route.policy.settings.fingerprint;
    let fingerprint = Fingerprint::new(policy, &parts.method, &parts.uri, &parts.headers, &body);
    Ok(Identity::Keyed(Identified {
        parts,
        body,
        key,
        scope,
        record,
        fingerprint,
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

impl Identified {
    /// The request's fingerprint under the route's `fingerprint_previous`, when that
    /// policy differs from `fingerprint`: what a record stored before the policy changed
    /// was made under. Computed only for a record that does not match (hashing the
    /// body again), never on the way of a request whose record matches or is new.
    pub fn previous(&self, route: &Route) -> Option<Fingerprint> {
        let policy = &route.policy;
        policy.fingerprint_changed.then(|| {
            let (parts, previous) = (&self.parts, &policy.settings.fingerprint_previous);
            Fingerprint::new(
                previous,
                &parts.method,
                &parts.uri,
                &parts.headers,
                &self.body,
            )
        })
    }
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
