//! `[[routes]]`: each upstream with the path prefix routed to it, and the rules of a
//! route's own keys (its idempotency settings are checked as
//! [`IdempotencyConfig`](super::idempotency::IdempotencyConfig)s).

use std::collections::HashSet;
use std::time::Duration;

use http::Uri;
use serde::{Deserialize, Serialize};

use super::error::{positive_duration, ConfigError};
use super::idempotency::IdempotencyOverrides;
use super::tls::UpstreamTls;
use super::typed;

/// `[[routes]]`: one upstream and the path prefix routed to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name, in metrics (`route` label) and logs: 1 to 64 of `A-Z`, `a-z`,
    /// `0-9`, `_`, `-`, unique.
    pub name: String,
    /// Requests whose path it covers, by whole segments, go to this route (the longest
    /// such prefix wins); starts with `/`.
    pub path_prefix: String,
    /// `http://host:port` or `https://host:port`, parsed (and checked) while the
    /// configuration is read.
    #[serde(with = "typed")]
    pub upstream: Uri,
    /// Longest a keyed request's client waits for the upstream's answer; then it gets
    /// 504 `upstream_timeout` with `Retry-After`, but the upstream call goes on under
    /// the key's lease (retries get 409 in flight, or wait), and its answer is stored
    /// and replayed to the retries that come after it (docs/guarantees.md, "A slow
    /// upstream"). For a request without a key: the longest wait for the response head.
    #[serde(with = "humantime_serde", default = "default_upstream_timeout")]
    pub upstream_timeout: Duration,
    /// The hard limit of a keyed upstream call, at least `upstream_timeout`: past it the
    /// call is cancelled and its outcome is unknown (`idempotency.on_ambiguous`). Five
    /// minutes by default: well past the idle and read timeouts upstreams and their own
    /// load balancers use (60 s is common), so a call still running then has almost
    /// surely been given up on by the upstream itself, while a key is held (and its
    /// retries answered 409) no longer than that.
    #[serde(with = "humantime_serde", default = "default_upstream_deadline")]
    pub upstream_deadline: Duration,
    /// How the gateway talks to the upstream: `"http1"`, `"h2c"` (HTTP/2 with prior
    /// knowledge, `http://` only) or `"h2"` (HTTP/2 over TLS chosen by ALPN, `https://`
    /// only). HTTP/2 upstreams share one multiplexed connection per upstream; gRPC
    /// upstreams need `"h2c"` or `"h2"`.
    #[serde(default)]
    pub upstream_protocol: UpstreamProtocol,
    #[serde(default)]
    pub idempotency: IdempotencyOverrides,
    #[serde(default)]
    pub tls: UpstreamTls,
}

fn default_upstream_timeout() -> Duration {
    Duration::from_secs(20)
}

fn default_upstream_deadline() -> Duration {
    Duration::from_secs(300)
}

/// `routes.upstream_protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/1.1, a pool of connections (over TLS for `https://`).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge, in the clear (`http://`).
    H2c,
    /// HTTP/2 over TLS, ALPN `h2` (`https://`).
    H2,
}
impl RouteConfig {
    /// The rules of the route at `at` (`routes[0]`): its name, valid and not among
    /// `names` (the routes before it), its prefix, timeout and TLS settings.
    pub(super) fn check<'a>(
        &'a self,
        at: &str,
        names: &mut HashSet<&'a str>,
    ) -> Result<(), ConfigError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && (self.name.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(ConfigError::invalid(
                format!("{at}.name"),
                "must be 1 to 64 characters of A-Z, a-z, 0-9, `_` or `-`",
            ));
        }
        if !names.insert(self.name.as_str()) {
            return Err(ConfigError::invalid(
                format!("{at}.name"),
                format!("duplicate route name `{}`", self.name),
            ));
        }
        if !self.path_prefix.starts_with('/') {
            return Err(ConfigError::invalid(
                format!("{at}.path_prefix"),
                "must start with `/`",
            ));
        }
        positive_duration(&format!("{at}.upstream_timeout"), self.upstream_timeout)?;
        if self.upstream_deadline < self.upstream_timeout {
            return Err(ConfigError::invalid(
                format!("{at}.upstream_deadline"),
                "must be at least `upstream_timeout`: the call goes on after its client's timeout",
            ));
        }
        let https = self.upstream.scheme_str() == Some("https");
        let protocol_fits = match self.upstream_protocol {
            UpstreamProtocol::Http1 => true,
            UpstreamProtocol::H2c => !https,
            UpstreamProtocol::H2 => https,
        };
        if !protocol_fits {
            return Err(ConfigError::invalid(
                format!("{at}.upstream_protocol"),
                "\"h2c\" needs an http:// upstream and \"h2\" an https:// one",
            ));
        }
        if !https && self.tls.is_set() {
            return Err(ConfigError::invalid(
                format!("{at}.tls"),
                "is set but the upstream is not https://: the connection would be plaintext",
            ));
        }
        Ok(())
    }
}
