//! `[idempotency]` and `[routes.idempotency]`: every idempotency setting declared once
//! (`idempotency_settings!`) and the rules a route's effective settings must meet; the
//! policies they choose between are in [`policies`](super::policies).

use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use serde::{Deserialize, Serialize};

use super::error::{positive_duration, ConfigError};
use super::fingerprint::FingerprintPolicy;
use super::grpc::GrpcCode;
use super::header_pattern::HeaderPattern;
use super::key_from::KeyFrom;
use super::postgres::{ClaimDurability, PostgresConfig};
use super::status_set::StatusSet;
use super::typed;

pub use super::policies::{
    AnonymousScope, InFlightPolicy, OnAmbiguous, OnRedisUnavailable, Streaming,
};

/// Declares each idempotency setting once (its type, serde form, default and doc) and
/// generates from that one list [`IdempotencyConfig`] with its `Default`, the
/// per-route [`IdempotencyOverrides`] (every route setting as an `Option`) and
/// [`IdempotencyOverrides::apply`], which merges a route's overrides over the
/// defaults. Settings under `global` cannot be overridden per route.
macro_rules! idempotency_settings {
    (
        route { $( $(#[$rmeta:meta])* $rname:ident : $rty:ty = $rdefault:expr; )* }
        global { $( $(#[$gmeta:meta])* $gname:ident : $gty:ty = $gdefault:expr; )* }
    ) => {
        /// `[idempotency]`: the defaults every route starts from; also a route's
        /// effective settings once its overrides are applied ([`crate::route::Policy`]).
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct IdempotencyConfig {
            $( $(#[$rmeta])* pub $rname: $rty, )*
            $( $(#[$gmeta])* pub $gname: $gty, )*
        }

        impl Default for IdempotencyConfig {
            fn default() -> Self {
                Self {
                    $( $rname: $rdefault, )*
                    $( $gname: $gdefault, )*
                }
            }
        }

        /// `[routes.idempotency]`: this route's own values of settings of `[idempotency]`
        /// ([`IdempotencyConfig`]); a setting left out takes the `[idempotency]` value.
        #[derive(Debug, Clone, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct IdempotencyOverrides {
            $(
                $(#[$rmeta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $rname: Option<$rty>,
            )*
        }

        impl IdempotencyOverrides {
            /// The route's effective settings: each override, else the default.
            pub fn apply(&self, base: &IdempotencyConfig) -> IdempotencyConfig {
                IdempotencyConfig {
                    $( $rname: self.$rname.clone().unwrap_or_else(|| base.$rname.clone()), )*
                    $( $gname: base.$gname.clone(), )*
                }
            }
        }
    };
}

idempotency_settings! {
    route {
        /// The header that carries the idempotency key.
        #[serde(with = "typed")]
        header: HeaderName = HeaderName::from_static("idempotency-key");
        /// Other headers accepted for the key, after `header`.
        #[serde(with = "typed")]
        header_aliases: Vec<HeaderName> = vec![HeaderName::from_static("x-idempotency-key")];
        /// The methods that go through the idempotency layer; others pass through.
        #[serde(with = "typed")]
        methods: Vec<Method> = vec![Method::POST, Method::PATCH];
        /// Where the key is read: `"header"` (`header`, then `header_aliases`) or
        /// `"json:<JSON Pointer>"`, a string member of a JSON body (`"json:/idempotency_key"`,
        /// as APIs that carry the key in the body have it). With a pointer, the header
        /// still wins when present, and a body that names another key is refused (400
        /// `idempotency_key_conflict`); a key that is not a string, or is named twice on
        /// the way, is refused (400 `idempotency_key_not_in_body`), as is a body without
        /// one where `required` (docs/http.md, "Where the key comes from").
        key_from: KeyFrom = KeyFrom::Header;
        /// Whether a covered request without a key is refused (400).
        required: bool = false;
        /// Longest key accepted, in visible ASCII characters; a longer key is refused (400).
        max_key_length: usize = 255;
        /// How long a completed response is kept and replayed.
        #[serde(with = "humantime_serde")]
        ttl: Duration = Duration::from_secs(24 * 3600);
        /// The lease of an in-flight request (extended by its heartbeat).
        #[serde(with = "humantime_serde")]
        lock_ttl: Duration = Duration::from_secs(30);
        /// The headers whose values name the tenant (each absent, or present once). Prefer
        /// a stable tenant header set by the auth layer (`X-Tenant-Id`) over a credential
        /// that changes when it is refreshed (`Authorization`).
        #[serde(with = "typed")]
        scope_headers: Vec<HeaderName> = vec![http::header::AUTHORIZATION];
        /// A keyed request with none of `scope_headers`: refused, or put in one scope that
        /// every such caller shares (and so sees each other's stored responses).
        anonymous: AnonymousScope = AnonymousScope::Reject;
        /// Whether replays repeat the first response's `Set-Cookie` headers. When false,
        /// they are not stored at all: only the first execution's client gets them.
        replay_set_cookie: bool = false;
        /// Response headers that are passed to the first client but never stored, so
        /// replays do not repeat them: names, or prefixes ending in `*`
        /// (`"x-ratelimit-*"`), in any case; `*` only at the end. Beside `Set-Cookie`'s
        /// rule (`replay_set_cookie`). Replays of records stored before a header was
        /// listed leave it out too (docs/http.md, "What a replay repeats").
        replay_omit_headers: Vec<HeaderPattern> = HeaderPattern::defaults();
        /// What of a keyed request its fingerprint covers, the hash a retry with the same
        /// key must match (docs/http.md, "Fingerprint").
        fingerprint: FingerprintPolicy = FingerprintPolicy::default();
        /// The policy records stored before the last change of `fingerprint` were made
        /// under; keep it one `ttl` after a change. The default is the default policy (the
        /// fingerprint of earlier releases).
        fingerprint_previous: FingerprintPolicy = FingerprintPolicy::default();
        /// The status of a reused key with a different request (a 4xx).
        #[serde(with = "typed")]
        mismatch_status: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;
        /// Upstream statuses that release the key instead of being stored: codes (`503`)
        /// and classes (`"5xx"`, `"4xx"`); `["4xx", "5xx"]` stores only successes and
        /// redirects. A success (`"2xx"`, `200` to `299`) is refused: the route would
        /// never store one.
        release_statuses: StatusSet = StatusSet::codes(&[
            StatusCode::REQUEST_TIMEOUT,
            StatusCode::TOO_EARLY,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::BAD_GATEWAY,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::GATEWAY_TIMEOUT,
        ]);
        /// gRPC statuses (by name, as `grpc-status` carries them in a `200` response to a
        /// gRPC call) that release the key instead of being stored, as
        /// `release_statuses` does for HTTP statuses: codes by which a gRPC server says
        /// it did not act. `OK` cannot be one (docs/http.md, "gRPC").
        release_grpc_statuses: Vec<GrpcCode> = vec![
            GrpcCode::Unavailable,
            GrpcCode::ResourceExhausted,
            GrpcCode::DeadlineExceeded,
        ];
        /// What a keyed request gets while Redis is down (its breaker open) or a claim
        /// times out.
        on_redis_unavailable: OnRedisUnavailable = OnRedisUnavailable::Postgres;
        /// What a duplicate of an in-flight request gets: 409 at once, or a wait for the result.
        in_flight: InFlightPolicy = InFlightPolicy::Reject;
        /// How long a waiting duplicate waits before its 409.
        #[serde(with = "humantime_serde")]
        wait_timeout: Duration = Duration::from_secs(10);
        /// Most duplicates waiting on one key across the fleet; more get 409 at once.
        /// A duplicate joining a live answer (`streaming`) keeps its place until its
        /// answer ends.
        max_waiters: u32 = 100;
        /// How a keyed answer reaches its first client. `"live"`: an answer that streams
        /// (`text/event-stream`, a gRPC answer, or any answer without `Content-Length`)
        /// is forwarded as the upstream sends it and recorded on the way, and
        /// duplicates that wait (`in_flight = "wait"`) join it on any replica; an answer
        /// with a `Content-Length` is buffered. `"buffer"`: every keyed answer is
        /// buffered whole, then sent (docs/http.md, "Streaming").
        streaming: Streaming = Streaming::Live;
        /// An upstream call whose outcome nobody knows: a reset after the request may have
        /// reached the upstream, a call cancelled at the route's `upstream_deadline` or
        /// by a stop, or a lease that lapsed under a replica that went away mid-call
        /// (where Postgres holds leases). `"store"` (the default since 0.5.0) keeps the
        /// key's promise that it never runs twice; `"release"` lets a retry run it again,
        /// for an upstream that deduplicates on the forwarded key itself
        /// (docs/guarantees.md, "Ambiguous outcomes", "A lapsed lease").
        on_ambiguous: OnAmbiguous = OnAmbiguous::Store;
        /// The response header that tells the client until when its key is honoured: an
        /// HTTP-date, the moment the record stops being replayed (its completion plus
        /// `ttl`, rounded up to a whole second), on the first answer that stores a record
        /// and on every replay of it, the same on each. `false` leaves it out; a name
        /// renames it (records stored before a rename replay under the name they were
        /// stored with). Not yet standardised (docs/http.md, "Idempotency-Expires").
        expires_header: ExpiresHeader = ExpiresHeader::default();
        /// Keep each request with its durable lease, so that the completer can send it
        /// again if its replica dies mid-request and the client never retries
        /// (docs/completer.md). Needs `[postgres]` with `claims = "write_through"` (or
        /// `"vouched"`, which writes such a route's claims through), and
        /// an upstream that treats the forwarded `Idempotency-Key` as its own
        /// deduplication key.
        completer: bool = false;
    }
    global {
        /// A file holding the server secret that keys scope and record ids (HMAC-SHA-256),
        /// so that hashes in logs and Postgres cannot be reversed. Global only.
        scope_secret_file: Option<std::path::PathBuf> = None;
        /// After introducing `scope_secret_file`: also look new keys up under their
        /// unkeyed (pre-secret) ids, so records stored before the upgrade replay. Turn off
        /// one `ttl` after the upgrade. Global only.
        lookup_unkeyed_ids: bool = false;
    }
}

/// Response headers `expires_header` cannot be: framing, hop-by-hop, per-exchange and
/// the gateway's own.
const RESERVED_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "content-type",
    "date",
    "keep-alive",
    "server",
    "set-cookie",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "retry-after",
    "idempotent-replayed",
    "idempotency-status",
    "idempotency-key",
    "x-request-id",
];

/// Longest `ttl`: a record's expiry is a date a client can be told.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `idempotency.expires_header`: `true` (`Idempotency-Expires`), `false` (none), or a
/// header name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiresHeader(pub Option<HeaderName>);

impl Default for ExpiresHeader {
    fn default() -> Self {
        Self(Some(HeaderName::from_static("idempotency-expires")))
    }
}

impl<'de> Deserialize<'de> for ExpiresHeader {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            On(bool),
            Name(String),
        }
        match Form::deserialize(d)? {
            Form::On(true) => Ok(Self::default()),
            Form::On(false) => Ok(Self(None)),
            Form::Name(name) => HeaderName::from_bytes(name.as_bytes())
                .map(|name| Self(Some(name)))
                .map_err(|_| {
                    D::Error::custom(format!(
                        "`{name}` is not a valid header name (or `true`, `false`)"
                    ))
                }),
        }
    }
}

impl Serialize for ExpiresHeader {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Some(name) => s.serialize_str(name.as_str()),
            None => s.serialize_bool(false),
        }
    }
}
impl IdempotencyConfig {
    /// The rules of one set of settings (`[idempotency]`, or a route's effective ones),
    /// each error naming its key under `at`.
    pub(super) fn check(&self, at: &str) -> Result<(), ConfigError> {
        // Header names, methods and statuses were parsed with the configuration.
        if self.scope_headers.is_empty() {
            return Err(ConfigError::invalid(
                format!("{at}.scope_headers"),
                "name at least one tenant header",
            ));
        }
        if self.max_key_length == 0 || self.max_key_length > 4096 {
            return Err(ConfigError::invalid(
                format!("{at}.max_key_length"),
                "must be between 1 and 4096",
            ));
        }
        positive_duration(&format!("{at}.ttl"), self.ttl)?;
        positive_duration(&format!("{at}.lock_ttl"), self.lock_ttl)?;
        if self.ttl < self.lock_ttl {
            return Err(ConfigError::invalid(
                format!("{at}.ttl"),
                "must be at least `lock_ttl`: a response must be kept at least as long as its lease",
            ));
        }
        positive_duration(&format!("{at}.wait_timeout"), self.wait_timeout)?;
        if self.max_waiters == 0 {
            return Err(ConfigError::invalid(
                format!("{at}.max_waiters"),
                "must be greater than zero",
            ));
        }
        if let Some((i, success)) = self.release_statuses.first_success() {
            return Err(ConfigError::invalid(
                format!("{at}.release_statuses[{i}]"),
                format!("{success} is a success: the route would store none, and every retry would run again"),
            ));
        }
        if self.release_grpc_statuses.contains(&GrpcCode::Ok) {
            return Err(ConfigError::invalid(
                format!("{at}.release_grpc_statuses"),
                "cannot hold OK: every successful call would be free to run again",
            ));
        }
        if let Some(name) = &self.expires_header.0 {
            let name = name.as_str();
            if RESERVED_RESPONSE_HEADERS.contains(&name) {
                return Err(ConfigError::invalid(
                    format!("{at}.expires_header"),
                    format!("`{name}` is a header the response needs for itself"),
                ));
            }
            if self.replay_omit_headers.iter().any(|p| p.matches(name)) {
                return Err(ConfigError::invalid(
                    format!("{at}.expires_header"),
                    format!(
                        "`{name}` is in `replay_omit_headers`: replays would lack the expiry \
                         the first answer told"
                    ),
                ));
            }
        }
        if self.ttl > MAX_TTL {
            return Err(ConfigError::invalid(
                format!("{at}.ttl"),
                "must be at most 100 years",
            ));
        }
        if !self.mismatch_status.is_client_error() {
            return Err(ConfigError::invalid(
                format!("{at}.mismatch_status"),
                "must be a 4xx status",
            ));
        }
        Ok(())
    }

    /// `completer = true` needs a durable lease to keep the request with: `[postgres]` with
    /// `claims = "write_through"` or `"vouched"` (which writes such a route's claims
    /// through).
    pub(super) fn check_completer(
        &self,
        at: &str,
        postgres: Option<&PostgresConfig>,
    ) -> Result<(), ConfigError> {
        // Vouched claims write a completer route's claims through (with its request).
        let durable = postgres.is_some_and(|pg| pg.claims != ClaimDurability::RedisOnly);
        if self.completer && !durable {
            return Err(ConfigError::invalid(
                format!("{at}.completer"),
                "needs [postgres] with claims = \"write_through\" or \"vouched\": the \
                 completer sends a request again only from a durable lease",
            ));
        }
        Ok(())
    }
}
