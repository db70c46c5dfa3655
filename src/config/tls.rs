//! TLS settings of the proxy listener (`[server.tls]`) and of each dependency
//! (`[redis.tls]`, `[postgres.tls]`, `[routes.tls]`), and secrets read from files (`redis.password_file`, `postgres.password_file`,
//! `admin.token_file`).
//!
//! Postgres takes libpq's names and meanings: `sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`, either as `[postgres.tls]` keys or as parameters of `postgres.url` (the
//! form managed services hand out); [`PostgresTls::resolve`] merges the two and refuses
//! a setting given twice with different values. The connectors are built in
//! [`crate::tls`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// `[server.tls]`: HTTPS on `server.listen`. With `cert` and `key` set, the proxy
/// listener serves TLS only, offering HTTP/2 (`h2`) and HTTP/1.1 (`http/1.1`) by ALPN; the
/// admin listener stays plain HTTP. Both files are read again on SIGHUP and when either
/// file changes (checked every 5 seconds): new handshakes get the new certificate, open
/// connections keep theirs, and a pair that cannot be used (unreadable, not PEM, a key
/// that does not go with the certificate) leaves the one in use in place, with a warning.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerTls {
    /// PEM file of the certificate chain the listener presents, the server's certificate
    /// first; needs `key`. Absent: plain HTTP (and h2c) on `server.listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM file of the private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl ListenerTls {
    /// The certificate and key files, when TLS is on.
    pub fn files(&self) -> Option<(&Path, &Path)> {
        Some((self.cert.as_deref()?, self.key.as_deref()?))
    }

    /// Both files or neither.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err(ConfigError::invalid(
                "server.tls.key",
                "required with server.tls.cert",
            )),
            (None, Some(_)) => Err(ConfigError::invalid(
                "server.tls.cert",
                "required with server.tls.key",
            )),
            _ => Ok(()),
        }
    }
}

/// `[redis.tls]`: used when `redis.url` is `rediss://`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisTls {
    /// PEM file of the CA certificate(s) the server's certificate must chain to;
    /// absent: the system's trusted roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) for mutual TLS; needs `key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of `cert_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Whether the certificate must name the URL's host (on by default). Off, the
    /// chain is still verified against `ca_file` (what libpq calls `verify-ca`).
    pub verify_server_name: bool,
}

impl Default for RedisTls {
    fn default() -> Self {
        Self {
            ca_file: None,
            cert_file: None,
            key_file: None,
            verify_server_name: true,
        }
    }
}

impl RedisTls {
    /// Whether any setting differs from the defaults (they mean nothing without `rediss://`).
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || !self.verify_server_name
    }
}

/// The `sslmode` of libpq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, else plaintext; the certificate is not verified
    /// (unless `sslrootcert` is given: then as `verify-ca`, as libpq does).
    Prefer,
    /// TLS or fail; the certificate is not verified (unless `sslrootcert` is given:
    /// then as `verify-ca`, as libpq does).
    Require,
    /// TLS; the certificate must chain to `sslrootcert` (or the system roots); its
    /// name is not checked.
    VerifyCa,
    /// TLS; the chain and the host name are verified.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[postgres.tls]`: TLS to Postgres, with libpq's names and meanings (each may also
/// be a `postgres.url` parameter).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresTls {
    /// Absent (and absent from the URL): `prefer`, libpq's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sslmode: Option<SslMode>,
    /// PEM file of the CA certificate(s); absent: the system's trusted roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sslrootcert: Option<PathBuf>,
    /// Client certificate chain (PEM); needs `sslkey`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sslcert: Option<PathBuf>,
    /// Private key (PEM) of `sslcert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sslkey: Option<PathBuf>,
}

/// The TLS settings of `[postgres]` once the URL's parameters are merged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPgTls {
    /// `postgres.url` without the TLS parameters (which tokio-postgres does not know).
    pub url: String,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    /// Client certificate and key, when both are given.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl PostgresTls {
    /// Merges the TLS parameters of `url` with these keys; a setting given in both
    /// places must agree. Errors name the key.
    pub fn resolve(&self, url: &str) -> Result<ResolvedPgTls, ConfigError> {
        let keyword_form = !super::conninfo::is_url(url);
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let pairs: Vec<(String, String, &str)> = match keyword_form {
            true => (super::conninfo::parse(url).ok_or_else(|| {
                ConfigError::invalid(
                    "postgres.url",
                    "is neither a postgres:// URL nor libpq key=value pairs",
                )
            })?)
            .into_iter()
            .map(|(name, value)| (name, value, ""))
            .collect(),
            false => (query.split('&').filter(|p| !p.is_empty()))
                .map(|pair| {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (name.to_string(), value.to_string(), pair)
                })
                .collect(),
        };
        let mut kept = Vec::new();
        let mut merged = self.clone();
        for (name, value, pair) in &pairs {
            let (name, value) = (name.as_str(), value.as_str());
            match name {
                "sslmode" => {
                    let mode = SslMode::parse(value).ok_or_else(|| {
                        ConfigError::invalid(
                            "postgres.url",
                            format!(
                                "sslmode={value} is not one of disable, prefer, require, \
                                 verify-ca, verify-full"
                            ),
                        )
                    })?;
                    merge(&mut merged.sslmode, mode, "sslmode")?;
                }
                "sslrootcert" => merge(&mut merged.sslrootcert, value.into(), name)?,
                "sslcert" => merge(&mut merged.sslcert, value.into(), name)?,
                "sslkey" => merge(&mut merged.sslkey, value.into(), name)?,
                _ => kept.push((name, value, *pair)),
            }
        }
        let identity = match (merged.sslcert, merged.sslkey) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::invalid(
                    "postgres.tls.sslcert",
                    "sslcert and sslkey go together: set both or neither",
                ))
            }
        };
        let url = if keyword_form {
            super::conninfo::render(kept.iter().map(|&(name, value, _)| (name, value)))
        } else if kept.is_empty() {
            base.to_string()
        } else {
            let raw: Vec<&str> = kept.iter().map(|&(_, _, pair)| pair).collect();
            format!("{base}?{}", raw.join("&"))
        };
        Ok(ResolvedPgTls {
            url,
            sslmode: merged.sslmode.unwrap_or(SslMode::Prefer),
            sslrootcert: merged.sslrootcert,
            identity,
        })
    }
}

/// Sets `slot` from the URL unless `[postgres.tls]` set it to something else.
fn merge<T: PartialEq>(slot: &mut Option<T>, value: T, name: &str) -> Result<(), ConfigError> {
    match slot {
        Some(given) if *given != value => Err(ConfigError::invalid(
            format!("postgres.tls.{name}"),
            format!("differs from the `{name}` parameter of postgres.url: set it in one place"),
        )),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// `[routes.tls]`: used when the route's upstream is `https://`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTls {
    /// PEM file of the CA certificate(s) the upstream's certificate must chain to;
    /// absent: the system's trusted roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Turns certificate verification off (chain and name). For test environments
    /// only: anyone on the path can then read and change the traffic. Logged as a
    /// warning at every start.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
}

impl UpstreamTls {
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.insecure_skip_verify
    }
}

/// Reads a secret (a password or token) from `path`, without its trailing newline.
/// The error names `key` and the path, never the contents.
pub fn read_secret(key: &str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::invalid(key, format!("cannot read {}: {e}", path.display())))?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(ConfigError::invalid(
            key,
            format!("{} is empty", path.display()),
        ));
    }
    Ok(secret.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_merge_with_keys_and_leave_the_url() {
        let tls = PostgresTls::default();
        let r = tls
            .resolve("postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&connect_timeout=2")
            .unwrap();
        assert_eq!(r.sslmode, SslMode::VerifyFull);
        assert_eq!(r.sslrootcert.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(r.url, "postgres://u@h/db?connect_timeout=2");
        assert_eq!(
            tls.resolve("postgres://h/db").unwrap().sslmode,
            SslMode::Prefer
        );

        let keyed = PostgresTls {
            sslmode: Some(SslMode::Require),
            ..Default::default()
        };
        let e = keyed
            .resolve("postgres://h/db?sslmode=disable")
            .unwrap_err();
        assert!(e.to_string().contains("postgres.tls.sslmode"), "{e}");
        let e = tls.resolve("postgres://h/db?sslmode=allow").unwrap_err();
        assert!(e.to_string().contains("sslmode=allow"), "{e}");
        let e = tls.resolve("postgres://h/db?sslcert=/c.pem").unwrap_err();
        assert!(e.to_string().contains("sslkey"), "{e}");
    }

    #[test]
    fn key_value_strings_resolve_as_urls_do() {
        let tls = PostgresTls::default();
        let r = (tls.resolve(
            "host=a,b port=1,2 sslmode=verify-full sslrootcert='/my ca.pem' \
             target_session_attrs=read-write",
        ))
        .unwrap();
        assert_eq!(r.sslmode, SslMode::VerifyFull);
        assert_eq!(r.sslrootcert.as_deref(), Some(Path::new("/my ca.pem")));
        assert_eq!(r.url, "host=a,b port=1,2 target_session_attrs=read-write");
        let keyed = PostgresTls {
            sslmode: Some(SslMode::Require),
            ..Default::default()
        };
        let e = keyed.resolve("host=h sslmode=disable").unwrap_err();
        assert!(e.to_string().contains("postgres.tls.sslmode"), "{e}");
        let e = tls.resolve("not a connection string").unwrap_err();
        assert!(e.to_string().contains("postgres.url"), "{e}");
    }

    #[test]
    fn secrets_lose_their_newline_and_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        assert_eq!(read_secret("redis.password_file", &path).unwrap(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        let e = read_secret("redis.password_file", &path).unwrap_err();
        assert!(e.to_string().contains("redis.password_file"), "{e}");
    }
}
