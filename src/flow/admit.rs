//! Phase 1, admit: which route a request is on, whether the route covers its method,
//! and its idempotency key ([`Admitted`]: from the header, or still to be read from the
//! body). What is not admitted to the idempotent path is forwarded unkeyed
//! ([`pass_through`]), or refused (no route, a missing or invalid key).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;

use super::refused::{Refused, Reply};
use crate::app::App;
use crate::config::KeyFrom;
use crate::idempotency::{key, IdempotencyKey, KeyError};
use crate::proxy::forwarding::Peer;
use crate::route::Route;

/// The route whose `path_prefix` matches `path`, if any.
pub fn route(app: &App, path: &str) -> Option<Arc<Route>> {
    app.routes.find(path).cloned()
}

/// How a request on the idempotent path is keyed.
pub enum Admitted {
    /// By its header.
    Key(IdempotencyKey),
    /// By its JSON body (`key_from = "json:..."`), read in [`super::identify`]; the
    /// header's key, if any, wins there when the body agrees.
    InBody(Option<IdempotencyKey>),
}

/// The request's idempotency key; `None` when the request goes through unkeyed (a
/// method the route does not cover, or no key on a route that does not require one).
/// A refusal is counted as [`Refused::outcome`] says.
pub fn key(route: &Route, request: &Request) -> Result<Option<Admitted>, Refused> {
    let policy = &route.policy;
    if !policy.covers(request.method()) {
        return Ok(None);
    }
    let header = key::extract(
        request.headers(),
        &policy.key_headers,
        policy.settings.max_key_length,
    );
    let header = match (&policy.settings.key_from, header) {
        (KeyFrom::Json(_), Ok(header)) => return Ok(Some(Admitted::InBody(header))),
        (_, header) => header,
    };
    match header {
        Ok(Some(key)) => Ok(Some(Admitted::Key(key))),
        Ok(None) if policy.settings.required => {
            let header = policy.key_headers[0].to_string();
            Err(KeyError::Missing(header).into())
        }
        Ok(None) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Forwards a request without idempotency, and without touching any store.
pub async fn pass_through(app: &App, route: &Route, request: Request, peer: SocketAddr) -> Reply {
    let (parts, body) = request.into_parts();
    let peer = Peer::new(peer.ip(), &app.config.server);
    match app
        .upstream
        .forward_streaming(route, parts, body, peer)
        .await
    {
        Ok(response) => Ok(response),
        Err(e) => {
            tracing::warn!(error = %e, "upstream call failed");
            Err(Refused::Upstream(e))
        }
    }
}
