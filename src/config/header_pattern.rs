//! Response header names a route keeps out of stored responses (`replay_omit_headers`):
//! [`HeaderPattern`], a name or, with a trailing `*`, a prefix (`x-ratelimit-*`),
//! case-insensitive, parsed with the configuration; and [`ReplayOmit`], a route's
//! patterns and its `Set-Cookie` rule made once into the one test the gateway runs on
//! each response header it stores or replays.

use http::header::SET_COOKIE;
use http::HeaderName;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A header name (`server-timing`), or a prefix of names (`x-ratelimit-*`), lower-case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPattern {
    /// The name, or the prefix without its `*`; lower-case.
    text: String,
    prefix: bool,
}

impl HeaderPattern {
    /// Parses `x-ratelimit-*` or `Server-Timing`; `*` only at the end, after at least one
    /// character (a lone `*` would keep every header out, the body's type too).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, prefix) = match text.strip_suffix('*') {
            Some(name) => (name, true),
            None => (text, false),
        };
        if name.contains('*') {
            return Err(format!(
                "`{text}`: `*` may only end a pattern (`x-ratelimit-*`)"
            ));
        }
        if name.is_empty() && prefix {
            return Err(format!(
                "`{text}` would keep every header out of replays: name a prefix before `*`"
            ));
        }
        // A prefix of a valid name is itself made of valid name characters.
        HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{text}` is not a valid header name or prefix"))?;
        Ok(Self {
            text: name.to_ascii_lowercase(),
            prefix,
        })
    }

    /// Whether `name` (lower-case, as every `HeaderName` is) matches.
    pub fn matches(&self, name: &str) -> bool {
        match self.prefix {
            true => name.starts_with(&self.text),
            false => name == self.text,
        }
    }

    /// The defaults of `replay_omit_headers`: rate-limit and timing headers, which
    /// describe one exchange.
    pub fn defaults() -> Vec<Self> {
        ["x-ratelimit-*", "ratelimit*", "server-timing"]
            .map(|p| Self::parse(p).expect("valid default"))
            .to_vec()
    }
}

impl std::fmt::Display for HeaderPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)?;
        if self.prefix {
            f.write_str("*")?;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for HeaderPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(D::Error::custom)
    }
}

impl Serialize for HeaderPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Which response headers are kept out of what a route stores and replays: its
/// `replay_omit_headers`, and `Set-Cookie` unless it replays cookies. Made once per
/// route; [`omits`](Self::omits) allocates nothing.
#[derive(Debug, Clone, Default)]
pub struct ReplayOmit {
    names: Vec<String>,
    prefixes: Vec<String>,
    set_cookie: bool,
}

impl ReplayOmit {
    /// The rule of `patterns`, and of `Set-Cookie` when `replay_set_cookie` is false.
    pub fn new(patterns: &[HeaderPattern], replay_set_cookie: bool) -> Self {
        let (prefixes, names): (Vec<&HeaderPattern>, Vec<&HeaderPattern>) =
            patterns.iter().partition(|p| p.prefix);
        let text = |p: Vec<&HeaderPattern>| p.into_iter().map(|p| p.text.clone()).collect();
        Self {
            names: text(names),
            prefixes: text(prefixes),
            set_cookie: !replay_set_cookie,
        }
    }

    /// Whether a header of this name is kept out of stored responses and replays.
    pub fn omits(&self, name: &HeaderName) -> bool {
        if self.set_cookie && *name == SET_COOKIE {
            return true;
        }
        let name = name.as_str();
        self.names.iter().any(|n| n == name) || self.prefixes.iter().any(|p| name.starts_with(p))
    }

    /// Whether no header is omitted (nothing to test).
    pub fn is_empty(&self) -> bool {
        !self.set_cookie && self.names.is_empty() && self.prefixes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &'static str) -> HeaderName {
        HeaderName::from_static(n)
    }

    #[test]
    fn patterns_parse_case_insensitively() {
        let p = HeaderPattern::parse("X-RateLimit-*").unwrap();
        assert_eq!(p.to_string(), "x-ratelimit-*");
        assert!(p.matches("x-ratelimit-remaining") && p.matches("x-ratelimit-"));
        assert!(!p.matches("x-ratelimit") && !p.matches("ratelimit-policy"));
        let exact = HeaderPattern::parse("Server-Timing").unwrap();
        assert!(exact.matches("server-timing") && !exact.matches("server-timing-2"));
        assert_eq!(exact.to_string(), "server-timing");
    }

    #[test]
    fn bad_patterns_say_why() {
        let cases = [
            ("x-*-y", "`*` may only end a pattern"),
            ("*x", "`*` may only end a pattern"),
            ("x**", "`*` may only end a pattern"),
            ("*", "would keep every header out"),
            ("", "is not a valid header name"),
            ("bad header", "is not a valid header name"),
            ("x:y*", "is not a valid header name"),
        ];
        for (text, message) in cases {
            let e = HeaderPattern::parse(text).unwrap_err();
            assert!(e.contains(message), "{text}: {e}");
        }
    }

    #[test]
    fn the_configuration_names_the_key_and_entry() {
        let err = |toml: &str| crate::Config::from_toml(toml).unwrap_err().to_string();
        let e = err("[idempotency]\nreplay_omit_headers = [\"a\", \"b\", \"x-*-y\"]\n");
        assert!(
            e.contains("idempotency.replay_omit_headers[2]") && e.contains("`*` may only end"),
            "{e}"
        );
        let route = "[[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\n\
                     upstream = \"http://127.0.0.1:1\"\n[routes.idempotency]\n";
        let e = err(&format!("{route}replay_omit_headers = [\"bad header\"]\n"));
        assert!(
            e.contains("routes[0].idempotency.replay_omit_headers[0]"),
            "{e}"
        );
        let ok = format!("{route}replay_omit_headers = [\"X-Cost-*\"]\n");
        let config = crate::Config::from_toml(&ok).unwrap();
        let patterns = config.routes[0].idempotency.replay_omit_headers.clone();
        assert_eq!(
            patterns.unwrap(),
            [HeaderPattern::parse("x-cost-*").unwrap()]
        );
        let defaults = crate::Config::default().idempotency.replay_omit_headers;
        assert_eq!(defaults, HeaderPattern::defaults());
    }

    #[test]
    fn the_rule_omits_patterns_and_set_cookie_unless_replayed() {
        let rule = ReplayOmit::new(&HeaderPattern::defaults(), false);
        for omitted in [
            "x-ratelimit-remaining",
            "ratelimit",
            "ratelimit-policy",
            "server-timing",
            "set-cookie",
        ] {
            assert!(rule.omits(&HeaderName::from_bytes(omitted.as_bytes()).unwrap()));
        }
        for kept in ["content-type", "x-rate", "server-timing-x", "retry-after"] {
            assert!(!rule.omits(&HeaderName::from_bytes(kept.as_bytes()).unwrap()));
        }
        let cookies = ReplayOmit::new(&HeaderPattern::defaults(), true);
        assert!(!cookies.omits(&name("set-cookie")) && !cookies.is_empty());
        assert!(ReplayOmit::new(&[], true).is_empty());
        // A pattern that names `Set-Cookie` omits it whatever `replay_set_cookie` says.
        let set = ReplayOmit::new(&[HeaderPattern::parse("set-*").unwrap()], true);
        assert!(set.omits(&name("set-cookie")));
    }
}
