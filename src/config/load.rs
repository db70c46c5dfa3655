//! Loading in layers: the built-in defaults, then a TOML file, then
//! `IDEMGATE__SECTION__KEY` environment variables ([`ENV_PREFIX`]), deserialised into
//! the schema with old spellings of renamed settings read first, then validated.

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;

use super::deprecated;
use super::error::ConfigError;
use super::validate::validate;
use super::Config;

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "IDEMGATE__";

impl Config {
    /// Loads defaults, then `path` (if any), then `IDEMGATE__*` variables, and validates.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut layers = Figment::new();
        if let Some(path) = path {
            if !path.is_file() {
                return Err(ConfigError::Parse(format!(
                    "configuration file {} does not exist or is not a file",
                    path.display()
                )));
            }
            layers = layers.merge(Toml::file_exact(path));
        }
        Self::extract(layers.merge(Env::prefixed(ENV_PREFIX).split("__")))
    }

    /// Parses a TOML document on top of the defaults (no environment), and validates.
    pub fn from_toml(toml: &str) -> Result<Self, ConfigError> {
        Self::extract(Figment::from(Toml::string(toml)))
    }

    /// The operator's `layers` (file, environment) over the defaults, into the schema,
    /// old spellings of renamed settings first read into their new keys
    /// ([`deprecated`]); then validated.
    fn extract(layers: Figment) -> Result<Self, ConfigError> {
        let defaults = Figment::from(Serialized::defaults(Config::default()));
        let given: figment::value::Dict = layers.extract().map_err(ConfigError::from_figment)?;
        let config = if deprecated::any(&given) {
            // Rewritten only when needed: the rewritten layers lose the name of the file
            // or variable each value came from, which errors otherwise cite.
            let mut given = given;
            let found = deprecated::rewrite(&mut given)?;
            let mut config: Config = (defaults.merge(Serialized::defaults(given)))
                .extract()
                .map_err(ConfigError::from_figment)?;
            config.deprecated = found;
            config
        } else {
            (defaults.merge(layers))
                .extract()
                .map_err(ConfigError::from_figment)?
        };
        validate(&config)?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytesize::ByteSize;

    use crate::config::Config;

    #[test]
    fn sizes_and_durations_parse_in_human_form() {
        let c = Config::from_toml(
            "[server]\nmax_request_body = \"2MiB\"\nshutdown_grace = \"250ms\"\n\
             linger_bytes = \"0B\"\nlinger_time = \"1500ms\"\n[idempotency]\nttl = \"1h\"\n",
        )
        .unwrap();
        assert_eq!(c.server.max_request_body, ByteSize::mib(2));
        assert_eq!(c.server.shutdown_grace, Duration::from_millis(250));
        assert_eq!(c.server.linger_bytes, ByteSize::b(0));
        assert_eq!(c.server.linger_time, Duration::from_millis(1500));
        assert_eq!(c.idempotency.ttl, Duration::from_secs(3600));
    }

    #[test]
    fn route_overrides_inherit_the_rest() {
        let c = Config::from_toml(
            "[[routes]]\nname = \"a\"\npath_prefix = \"/a/\"\nupstream = \"http://127.0.0.1:1\"\n\
             upstream_timeout = \"1s\"\n[routes.idempotency]\nrequired = true\nttl = \"5m\"\n",
        )
        .unwrap();
        let eff = c.routes[0].idempotency.apply(&c.idempotency);
        assert!(eff.required);
        assert_eq!(eff.ttl, Duration::from_secs(300));
        assert_eq!(eff.lock_ttl, c.idempotency.lock_ttl);
    }

    #[test]
    fn expires_header_is_a_name_true_or_false() {
        let header = |value: &str| {
            Config::from_toml(&format!("[idempotency]\nexpires_header = {value}\n"))
                .map(|c| c.idempotency.expires_header.0.map(|n| n.to_string()))
        };
        let default = Some("idempotency-expires".to_string());
        assert_eq!(
            Config::default()
                .idempotency
                .expires_header
                .0
                .map(|n| n.to_string()),
            default
        );
        assert_eq!(header("true").unwrap(), default);
        assert_eq!(header("false").unwrap(), None);
        assert_eq!(
            header("\"X-Key-Expires\"").unwrap(),
            Some("x-key-expires".into())
        );
        let err = header("\"not a name\"").unwrap_err().to_string();
        assert!(err.contains("idempotency.expires_header"), "{err}");
    }

    #[test]
    fn upstream_deadline_is_at_least_upstream_timeout() {
        let route = |deadline: &str| {
            Config::from_toml(&format!(
                "[[routes]]\nname = \"a\"\npath_prefix = \"/a/\"\nupstream = \"http://127.0.0.1:1\"\n\
                 upstream_timeout = \"10s\"\n{deadline}"
            ))
        };
        assert_eq!(
            route("").unwrap().routes[0].upstream_deadline,
            Duration::from_secs(300)
        );
        let err = route("upstream_deadline = \"5s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("routes[0].upstream_deadline"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("[redis]\nurll = \"redis://x\"\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("urll"), "{text}");
    }

    #[test]
    fn bad_values_are_named() {
        let err = Config::from_toml("[server]\nshutdown_grace = \"soon\"\n").unwrap_err();
        assert!(err.to_string().contains("server.shutdown_grace"), "{err}");
        let err = Config::from_toml("[log]\nqueue_lines = 0\n").unwrap_err();
        assert!(err.to_string().contains("log.queue_lines"), "{err}");
    }
}
