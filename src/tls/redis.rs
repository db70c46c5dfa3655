//! Redis over TLS and the password file: [`apply`] finishes a fred configuration
//! parsed from `redis.url`, whatever the deployment mode. A `rediss://` URL makes fred
//! ask for TLS; this replaces fred's default connector (system roots only) with one
//! from `[redis.tls]` (CA file, client certificate, name verification).

use fred::prelude::Config as FredConfig;
use fred::types::config::TlsConnector;

use super::{client_config, Identity, TlsError, Trust, Verify};
use crate::config::{read_secret, RedisConfig};

/// Sets the password from `redis.password_file` and, when the URL asked for TLS,
/// the TLS connector from `[redis.tls]`. Reads files: call at start-up only.
pub fn apply(fred: &mut FredConfig, config: &RedisConfig) -> Result<(), TlsError> {
    if let Some(path) = &config.password_file {
        let password = read_secret("redis.password_file", path).map_err(|e| TlsError {
            key: "redis.password_file".into(),
            message: e.to_string(),
        })?;
        fred.password = Some(password);
    }
    if fred.tls.is_none() {
        return Ok(());
    }
    let tls = &config.tls;
    let trust = Trust {
        key: "redis.tls.ca_file",
        ca_file: tls.ca_file.as_deref(),
    };
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(cert_file), Some(key_file)) => Some(Identity {
            key: "redis.tls.cert_file",
            cert_file,
            key_file,
        }),
        _ => None,
    };
    let verify = if tls.verify_server_name {
        Verify::Full
    } else {
        Verify::ChainOnly
    };
    let client = client_config(&trust, identity.as_ref(), verify)?;
    fred.tls = Some(TlsConnector::from(client).into());
    Ok(())
}

impl From<TlsError> for fred::error::Error {
    fn from(e: TlsError) -> Self {
        fred::error::Error::new(fred::error::ErrorKind::Tls, e.to_string())
    }
}
