//! The request flow of the idempotency layer, as named phases in the order a keyed
//! request meets them: [`admit`] → [`identify`] (with [`body`]) → [`claim`] →
//! [`run`](mod@run) (on a task of its own, [`run::detached`], with [`watch`]) →
//! [`settle`] (with [`unknown`]); [`live`] is an answer that streams. What each phase
//! does and calls, from the connection to the log line, is told once, in
//! ARCHITECTURE.md's "The path of a keyed request".
//!
//! Every keyed request ends in one [`Outcome`], left in the [`Trace`] for the edge to
//! count and log; an answer the gateway makes itself is a [`Refused`], which the edge
//! renders as problem+json. The completer runs `run` and `settle` for an abandoned
//! request ([`run()`] with [`Runner::Completer`]).

pub mod admit;
pub mod body;
pub mod claim;
pub mod identify;
pub mod live;
pub mod refused;
pub mod run;
pub mod settle;
pub mod unknown;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;

use self::claim::Claimed;
use self::identify::Identity;
use crate::app::App;
use crate::idempotency::{RecordId, Scope};
use crate::metrics::Outcome;
use crate::route::Route;
use crate::telemetry::context::{self, in_span, phase};

pub use self::body::BodyError;
pub use self::refused::{Refused, Reply};
pub use self::run::run;
pub use self::settle::{Runner, Settled};

/// One request through the phases: its response, or what the gateway refuses it with.
pub async fn serve(app: &Arc<App>, peer: SocketAddr, request: Request, trace: &mut Trace) -> Reply {
    let Some(route) = admit::route(app, request.uri().path()) else {
        let refused = Refused::NoRoute(request.uri().path().len());
        return trace.refused(Outcome::Rejected, refused);
    };
    trace.routed(&route);
    let key = match admit::key(&route, &request) {
        Ok(Some(key)) => key,
        Ok(None) => return admit::pass_through(app, &route, request, peer).await,
        Err(refused) => return trace.refused(refused.outcome(), refused),
    };
    let traced = context::is_traced(request.extensions());
    let span = traced.then(|| phase!("identify"));
    let identified = match in_span!(span, identify::identify(app, &route, key, request)) {
        Ok(Identity::Keyed(identified)) => identified,
        Ok(Identity::Unkeyed(request)) => {
            return admit::pass_through(app, &route, request, peer).await;
        }
        Err(refused) => return trace.refused(refused.outcome(), refused),
    };
    trace.identified(identified.scope, identified.record);
    let span = traced.then(|| phase!("claim", db.system.name = "redis"));
    let (outcome, reply) = match in_span!(span, claim::claim(app, &route, &identified, peer.ip())) {
        Claimed::Acquired(lease) => run::detached(app, &route, lease, identified, peer).await,
        Claimed::Answered(outcome, reply) => (outcome, reply),
        Claimed::Bypassed => {
            let (parts, body) = (identified.parts, Body::from(identified.body));
            let request = Request::from_parts(parts, body);
            let reply = admit::pass_through(app, &route, request, peer).await;
            (Outcome::Bypassed, reply)
        }
    };
    trace.outcome = Some(outcome);
    reply
}

/// What one request came to, for the metrics and the log line.
#[derive(Default)]
pub struct Trace {
    pub route: Option<Arc<Route>>,
    /// `None`: forwarded unkeyed.
    pub outcome: Option<Outcome>,
    pub scope: Option<Scope>,
    pub record: Option<RecordId>,
    /// `record.short()`, when the span needed it.
    pub key_hash: Option<String>,
}

impl Trace {
    fn routed(&mut self, route: &Arc<Route>) {
        self.route = Some(route.clone());
        tracing::Span::current().record("route", route.name.as_str());
    }

    fn identified(&mut self, scope: Scope, record: RecordId) {
        (self.scope, self.record) = (Some(scope), Some(record));
        // Made once, and only when something records it (the span, then the log line).
        let span = tracing::Span::current();
        if !span.is_disabled() {
            let short = record.short();
            span.record("key_hash", short.as_str());
            self.key_hash = Some(short);
        }
    }

    fn refused(&mut self, outcome: Outcome, refused: Refused) -> Reply {
        self.outcome = Some(outcome);
        Err(refused)
    }
}
