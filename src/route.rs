//! The route table: which upstream and which idempotency policy a request path gets.
//! Built once at start from the configuration; the longest `path_prefix` that covers
//! the path by whole segments wins. Paths are put in canonical form, or refused,
//! before they are routed ([`path`]).

pub mod path;

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode, Uri};

use crate::config::{
    Config, GrpcCode, IdempotencyConfig, ReplayOmit, RouteConfig, UpstreamProtocol,
};
use crate::metrics::RouteMetrics;

/// One route with its effective (defaults plus overrides) idempotency policy.
#[derive(Debug)]
pub struct Route {
    pub name: String,
    pub path_prefix: String,
    pub upstream: Uri,
    pub upstream_timeout: Duration,
    /// The hard limit of a keyed upstream call (`upstream_deadline`).
    pub upstream_deadline: Duration,
    pub upstream_protocol: UpstreamProtocol,
    pub policy: Policy,
    pub metrics: RouteMetrics,
}

/// A route's idempotency policy: its effective settings (the defaults with the route's
/// overrides applied), already in the types the gateway uses.
#[derive(Debug)]
pub struct Policy {
    /// The key header first, then its aliases.
    pub key_headers: Vec<HeaderName>,
    /// The response headers kept out of stored responses and replays
    /// (`replay_omit_headers`, and `Set-Cookie` unless `replay_set_cookie`).
    pub replay_omit: ReplayOmit,
    /// Whether `fingerprint_previous` differs from `fingerprint`: only then is a record
    /// that does not match compared again under the previous policy.
    pub fingerprint_changed: bool,
    pub settings: IdempotencyConfig,
}

impl Policy {
    fn new(settings: IdempotencyConfig) -> Self {
        let key_headers = std::iter::once(&settings.header)
            .chain(&settings.header_aliases)
            .cloned()
            .collect();
        let replay_omit =
            ReplayOmit::new(&settings.replay_omit_headers, settings.replay_set_cookie);
        Self {
            key_headers,
            replay_omit,
            fingerprint_changed: settings.fingerprint_previous != settings.fingerprint,
            settings,
        }
    }

    /// Whether this method goes through the idempotency layer at all.
    pub fn covers(&self, method: &Method) -> bool {
        self.settings.methods.contains(method)
    }

    /// Whether an upstream answer with `status` releases the key instead of being stored.
    pub fn releases(&self, status: StatusCode) -> bool {
        self.settings.release_statuses.contains(status)
    }

    /// Whether a gRPC call that ended with `code` releases the key instead of being stored.
    pub fn releases_grpc(&self, code: GrpcCode) -> bool {
        self.settings.release_grpc_statuses.contains(&code)
    }
}

impl Route {
    fn new(route: &RouteConfig, defaults: &IdempotencyConfig) -> Self {
        Self {
            name: route.name.clone(),
            path_prefix: route.path_prefix.clone(),
            upstream: route.upstream.clone(),
            upstream_timeout: route.upstream_timeout,
            upstream_deadline: route.upstream_deadline,
            upstream_protocol: route.upstream_protocol,
            policy: Policy::new(route.idempotency.apply(defaults)),
            metrics: RouteMetrics::new(&route.name),
        }
    }
}

/// All routes, longest prefix first.
#[derive(Debug)]
pub struct RouteTable {
    routes: Vec<Arc<Route>>,
}

impl RouteTable {
    /// Builds the table from a configuration (its values are parsed; the cross-field
    /// rules are [`crate::config::validate`]'s, which [`crate::App::build`] runs).
    pub fn new(config: &Config) -> Self {
        let mut routes: Vec<Arc<Route>> = (config.routes.iter())
            .map(|r| Arc::new(Route::new(r, &config.idempotency)))
            .collect();
        routes.sort_by_key(|r| std::cmp::Reverse(r.path_prefix.len()));
        Self { routes }
    }

    /// The route with the longest prefix that covers `path` (canonical, see
    /// [`path::canonicalize`]) by whole segments.
    pub fn find(&self, path: &str) -> Option<&Arc<Route>> {
        self.routes
            .iter()
            .find(|r| path::covers(&r.path_prefix, path))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins_whatever_the_order() {
        let config = Config::from_toml(
            "[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nupstream = \"http://127.0.0.1:1\"\n\
             upstream_timeout = \"1s\"\n\
             [[routes]]\nname = \"pay\"\npath_prefix = \"/v1/pay\"\nupstream = \"http://127.0.0.1:2\"\n\
             upstream_timeout = \"1s\"\n\
             [[routes]]\nname = \"v1\"\npath_prefix = \"/v1/\"\nupstream = \"http://127.0.0.1:3\"\n\
             upstream_timeout = \"1s\"\n[routes.idempotency]\nrelease_statuses = [500]\n",
        )
        .unwrap();
        let table = RouteTable::new(&config);
        assert_eq!(table.find("/v1/pay/1").unwrap().name, "pay");
        assert_eq!(
            table.find("/v1/payments").unwrap().name,
            "v1",
            "whole segments"
        );
        assert_eq!(table.find("/v1/refunds").unwrap().name, "v1");
        assert_eq!(table.find("/health").unwrap().name, "all");
        let v1 = &table.find("/v1/x").unwrap().policy;
        assert!(v1.releases(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(!v1.releases(StatusCode::SERVICE_UNAVAILABLE));
        let pay = &table.find("/v1/pay").unwrap().policy;
        assert!(pay.releases(StatusCode::SERVICE_UNAVAILABLE));
        assert!(pay.covers(&Method::POST) && !pay.covers(&Method::GET));
    }

    #[test]
    fn no_route_no_match() {
        let config = Config::from_toml(
            "[[routes]]\nname = \"v1\"\npath_prefix = \"/v1/\"\nupstream = \"http://127.0.0.1:3\"\n\
             upstream_timeout = \"1s\"\n",
        )
        .unwrap();
        assert!(RouteTable::new(&config).find("/v2/x").is_none());
    }
}
