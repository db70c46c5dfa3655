//! [`ConfigError`], the one error of loading a configuration, naming the key it is about
//! in the form every rule uses (`server.trusted_proxies[1]`), and the two bounds most
//! sections' rules share: a duration or a size above zero.

use std::time::Duration;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or an environment variable did not parse into the schema.
    #[error("{0}")]
    Parse(String),
    /// A value parsed but is not acceptable.
    #[error("invalid configuration: `{key}`: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }

    pub(super) fn from_figment(err: figment::Error) -> Self {
        let lines: Vec<String> = err
            .into_iter()
            .map(|e| {
                let key = if e.path.is_empty() {
                    "(top level)".to_string()
                } else {
                    key_path(&e.path)
                };
                let origin = e
                    .metadata
                    .as_ref()
                    .map(|m| format!(" (from {})", m.name))
                    .unwrap_or_default();
                format!("invalid configuration: `{key}`: {}{origin}", e.kind)
            })
            .collect();
        Self::Parse(lines.join("\n"))
    }
}

/// `["server", "trusted_proxies", "1"]` as `server.trusted_proxies[1]`, the form
/// [`validate`](super::validate::validate) uses for list entries too.
fn key_path(path: &[String]) -> String {
    let mut key = String::new();
    for part in path {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            key.push('[');
            key.push_str(part);
            key.push(']');
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(part);
        }
    }
    key
}
/// `key` must be a duration above zero.
pub(super) fn positive_duration(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(ConfigError::invalid(key, "must be greater than zero"));
    }
    Ok(())
}

/// `key` must be a size above zero.
pub(super) fn positive_size(key: &str, bytes: u64) -> Result<(), ConfigError> {
    if bytes == 0 {
        return Err(ConfigError::invalid(key, "must be greater than zero"));
    }
    Ok(())
}
