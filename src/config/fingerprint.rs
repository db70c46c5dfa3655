//! `[idempotency.fingerprint]` (and `fingerprint_previous`): what of a keyed request
//! makes its fingerprint, the hash a retry must match (docs/http.md, "Fingerprint").
//! The default policy fingerprints exactly as earlier releases did.

use http::HeaderName;
use serde::{Deserialize, Serialize};

use super::pointer::JsonPointer;
use super::typed;

/// What makes two keyed requests with the same key "the same request": method, path and
/// query (per `query`), content type, the body (per `body`, less `ignore_json`) and the
/// headers named in `headers`. A retry that differs in any of these gets
/// `mismatch_status`. Overriding it on a route replaces the whole table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FingerprintPolicy {
    /// JSON Pointers (RFC 6901: `"/a/b"`, `~0` for `~` and `~1` for `/`; a segment that
    /// is exactly `*` matches every array element or object member, as in
    /// `"/items/*/client_ts"`) of values left out of a JSON body before it is
    /// canonicalised: a removed array element shifts the later ones. A pointer that
    /// matches nothing is fine. A body that is not JSON is fingerprinted as bytes, these
    /// pointers ignored.
    pub ignore_json: Vec<JsonPointer>,
    /// Request headers whose values (all of them, in order, trimmed of surrounding
    /// spaces and tabs) join the fingerprint; an absent header differs from an empty one.
    #[serde(with = "typed")]
    pub headers: Vec<HeaderName>,
    /// How the body joins the fingerprint.
    pub body: BodyMode,
    /// How the query string joins the fingerprint.
    pub query: QueryMode,
}

/// `idempotency.fingerprint.body`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyMode {
    /// A JSON body (`application/json`, `+json`) canonicalised (members sorted,
    /// whitespace and escapes normalised, `ignore_json` left out); any other body as bytes.
    #[default]
    CanonicalJson,
    /// The exact bytes, JSON or not (`ignore_json` does not apply).
    Bytes,
    /// The body is not hashed: method, path, query, content type and `headers` only.
    None,
}

/// `idempotency.fingerprint.query`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryMode {
    /// The query string as sent.
    #[default]
    Exact,
    /// The `&`-separated parameters sorted by their raw `name=value` text (not decoded),
    /// so `?a=1&b=2` and `?b=2&a=1` match; repeated parameters stay.
    Sorted,
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn reads_a_policy_and_names_a_bad_pointer_or_header() {
        let toml = "[idempotency.fingerprint]\nignore_json = [\"/ts\", \"/items/*/ts\"]\n\
                    headers = [\"Stripe-Account\"]\nbody = \"bytes\"\nquery = \"sorted\"\n";
        let config = Config::from_toml(toml).unwrap();
        let fp = &config.idempotency.fingerprint;
        assert_eq!(fp.ignore_json[1].to_string(), "/items/*/ts");
        assert_eq!(fp.headers[0], "stripe-account");
        assert_eq!(fp.body, super::BodyMode::Bytes);
        assert_eq!(fp.query, super::QueryMode::Sorted);
        assert_eq!(config.idempotency.fingerprint_previous, Default::default());

        let bad = "[idempotency.fingerprint]\nignore_json = [\"/ok\", \"ts\"]\n";
        let err = Config::from_toml(bad).unwrap_err().to_string();
        assert!(
            err.contains("idempotency.fingerprint.ignore_json[1]") && err.contains("\"/\""),
            "{err}"
        );
        let bad = "[idempotency.fingerprint]\nheaders = [\"bad header\"]\n";
        let err = Config::from_toml(bad).unwrap_err().to_string();
        assert!(err.contains("idempotency.fingerprint.headers[0]"), "{err}");
        let bad = "[idempotency.fingerprint]\nbody = \"json\"\n";
        assert!(Config::from_toml(bad).is_err());
    }

    #[test]
    fn a_route_override_replaces_the_whole_table() {
        let toml = "[idempotency.fingerprint]\nignore_json = [\"/ts\"]\n\
                    [[routes]]\nname = \"a\"\npath_prefix = \"/a/\"\nupstream = \"http://127.0.0.1:1\"\n\
                    [routes.idempotency.fingerprint]\nbody = \"none\"\n\
                    [[routes]]\nname = \"b\"\npath_prefix = \"/b/\"\nupstream = \"http://127.0.0.1:1\"\n";
        let config = Config::from_toml(toml).unwrap();
        let route = |i: usize| config.routes[i].idempotency.apply(&config.idempotency);
        let a = route(0).fingerprint;
        assert_eq!((a.body, a.ignore_json.len()), (super::BodyMode::None, 0));
        let b = route(1).fingerprint;
        assert_eq!(
            (b.body, b.ignore_json.len()),
            (super::BodyMode::CanonicalJson, 1)
        );
        assert_eq!(
            route(0).fingerprint_previous,
            super::FingerprintPolicy::default()
        );
    }
}
