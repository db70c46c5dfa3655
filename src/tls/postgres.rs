//! Postgres over TLS with libpq's `sslmode` meanings, through `tokio-postgres-rustls`.
//!
//! | `sslmode` | TLS | certificate checked |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` | if the server offers it | no (the chain, when `sslrootcert` is set) |
//! | `require` | always | no (the chain, when `sslrootcert` is set) |
//! | `verify-ca` | always | the chain, not the name |
//! | `verify-full` | always | the chain and the host name |
//!
//! As in libpq, `prefer` and `require` with an explicit `sslrootcert` verify the chain
//! (libpq: "if a root CA file exists, `require` behaves like `verify-ca`").

use std::path::Path;

use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{client_config, Identity, TlsError, Trust, Verify};
use crate::config::{read_secret, PostgresConfig, ResolvedPgTls, SslMode};

/// The session settings of `[postgres]` (the URL without its TLS parameters, the
/// `sslmode`, the password from `password_file`) and the TLS connector. Reads files:
/// call at start-up only. The error names the key.
pub fn session(
    config: &PostgresConfig,
) -> Result<(tokio_postgres::Config, MakeRustlsConnect), String> {
    let tls = config.tls.resolve(&config.url).map_err(|e| e.to_string())?;
    let mut pg: tokio_postgres::Config =
        (tls.url.parse()).map_err(|e: tokio_postgres::Error| {
            format!("invalid configuration: `postgres.url`: {e}")
        })?;
    pg.ssl_mode(ssl_mode(tls.sslmode));
    if let Some(path) = &config.password_file {
        let password = read_secret("postgres.password_file", path).map_err(|e| e.to_string())?;
        pg.password(password);
    }
    let connector = connector(&tls).map_err(|e| e.to_string())?;
    Ok((pg, connector))
}

/// tokio-postgres's mode (it knows whether to ask for TLS, not what to verify).
pub fn ssl_mode(mode: SslMode) -> PgSslMode {
    match mode {
        SslMode::Disable => PgSslMode::Disable,
        SslMode::Prefer => PgSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
    }
}

/// What `sslmode` (with or without `sslrootcert`) verifies.
pub fn verification(mode: SslMode, rootcert: Option<&Path>) -> Verify {
    match mode {
        SslMode::VerifyFull => Verify::Full,
        SslMode::VerifyCa => Verify::ChainOnly,
        SslMode::Disable | SslMode::Prefer | SslMode::Require if rootcert.is_some() => {
            Verify::ChainOnly
        }
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Verify::Nothing,
    }
}

/// The connector for the resolved settings (unused with `disable`).
pub fn connector(tls: &ResolvedPgTls) -> Result<MakeRustlsConnect, TlsError> {
    let trust = Trust {
        key: "postgres.tls.sslrootcert",
        ca_file: tls.sslrootcert.as_deref(),
    };
    let identity = (tls.identity.as_ref()).map(|(cert_file, key_file)| Identity {
        key: "postgres.tls.sslcert",
        cert_file,
        key_file,
    });
    let verify = verification(tls.sslmode, tls.sslrootcert.as_deref());
    let config = client_config(&trust, identity.as_ref(), verify)?;
    Ok(MakeRustlsConnect::new(config))
}

/// Adds to a start-up failure which TLS settings were in force, and, when the server
/// refused a plaintext session (`no encryption` in its answer), which setting to change.
pub fn explain(e: anyhow::Error, config: &PostgresConfig) -> anyhow::Error {
    let Ok(tls) = config.tls.resolve(&config.url) else {
        return e;
    };
    let refused_plaintext = format!("{e:#}").contains("no encryption");
    if tls.sslmode == SslMode::Disable && refused_plaintext {
        return e.context(
            "postgres sslmode = disable (postgres.tls.sslmode or `sslmode` in postgres.url) \
             but the server accepts only TLS sessions: set sslmode = verify-full (or require)",
        );
    }
    e.context(format!(
        "connecting to postgres with sslmode = {}",
        tls.sslmode
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_meanings() {
        let ca = Some(Path::new("/ca.pem"));
        assert_eq!(verification(SslMode::Require, None), Verify::Nothing);
        assert_eq!(verification(SslMode::Prefer, None), Verify::Nothing);
        assert_eq!(verification(SslMode::Require, ca), Verify::ChainOnly);
        assert_eq!(verification(SslMode::VerifyCa, None), Verify::ChainOnly);
        assert_eq!(verification(SslMode::VerifyFull, ca), Verify::Full);
        assert_eq!(ssl_mode(SslMode::VerifyCa), PgSslMode::Require);
        assert_eq!(ssl_mode(SslMode::Disable), PgSslMode::Disable);
    }
}
