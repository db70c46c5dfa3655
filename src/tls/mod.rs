//! TLS to the dependencies: one rustls client configuration builder ([`client_config`]:
//! trusted roots, an optional client certificate, how much of the server certificate
//! is verified) used by Redis ([`redis`]), Postgres ([`postgres`]) and HTTPS upstreams
//! ([`upstream`]); and TLS on the proxy listener ([`listener`]: its certificate, reloaded
//! on SIGHUP or when the files change). The crypto provider is `ring`, chosen explicitly rather than
//! through a process-wide default.

pub mod listener;
pub mod postgres;
pub mod redis;
pub mod upstream;
mod verify;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// A TLS setting that cannot be used; names the configuration key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: `{key}`: {message}")]
pub struct TlsError {
    pub key: String,
    pub message: String,
}

impl TlsError {
    fn new(key: &str, message: impl Into<String>) -> Self {
        Self {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The chain to a trusted root and the server's name (the default everywhere).
    Full,
    /// The chain only (libpq's `verify-ca`, `redis.tls.verify_server_name = false`).
    ChainOnly,
    /// Nothing: encryption without authentication (libpq's `require`, an upstream's
    /// `insecure_skip_verify`). The handshake signatures are still checked.
    Nothing,
}

/// Where the trusted roots come from, for the error messages: `<section>.ca_file`.
pub struct Trust<'a> {
    /// The key that names the CA file (`redis.tls.ca_file`).
    pub key: &'a str,
    /// The CA file; `None`: the system's roots.
    pub ca_file: Option<&'a Path>,
}

/// A client certificate chain and its key, for mutual TLS.
pub struct Identity<'a> {
    /// The key that names the certificate file (`redis.tls.cert_file`).
    pub key: &'a str,
    pub cert_file: &'a Path,
    pub key_file: &'a Path,
}

/// The one crypto provider.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// A rustls client configuration (no ALPN set).
pub fn client_config(
    trust: &Trust<'_>,
    identity: Option<&Identity<'_>>,
    verify: Verify,
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(trust.key, e.to_string()))?;
    let builder = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verify::Nothing(provider()))),
        Verify::Full | Verify::ChainOnly => {
            let roots = Arc::new(roots(trust)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsError::new(trust.key, e.to_string()))?;
            if verify == Verify::Full {
                builder.with_webpki_verifier(webpki)
            } else {
                (builder.dangerous())
                    .with_custom_certificate_verifier(Arc::new(verify::ChainOnly(webpki)))
            }
        }
    };
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some(id) => {
            let certs = certs(id.key, id.cert_file)?;
            let key = private_key(id.key, id.key_file)?;
            (builder.with_client_auth_cert(certs, key)).map_err(|e| {
                TlsError::new(
                    id.key,
                    format!("{} does not go with its key: {e}", id.cert_file.display()),
                )
            })
        }
    }
}

/// The CA file's certificates, or the system's roots.
fn roots(trust: &Trust<'_>) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    match trust.ca_file {
        Some(path) => {
            for cert in certs(trust.key, path)? {
                store.add(cert).map_err(|e| {
                    TlsError::new(
                        trust.key,
                        format!("{}: not a CA certificate: {e}", path.display()),
                    )
                })?;
            }
        }
        None => {
            let (added, _) = store.add_parsable_certificates(system_roots().iter().cloned());
            if added == 0 {
                return Err(TlsError::new(
                    trust.key,
                    "no system CA certificates found (install ca-certificates) and no CA file set",
                ));
            }
        }
    }
    Ok(store)
}

/// The system's trusted roots, read once.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if !found.errors.is_empty() {
            tracing::warn!(errors = ?found.errors, "some system CA certificates could not be read");
        }
        found.certs
    })
}

/// The private key of a PEM file.
fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        TlsError::new(
            key,
            format!("no private key read from {}: {e}", path.display()),
        )
    })
}

/// Every certificate of a PEM file; at least one.
fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path)
        .map_err(|e| TlsError::new(key, format!("cannot read {}: {e}", path.display())))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(key, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError::new(
            key,
            format!("no PEM certificate in {}", path.display()),
        ));
    }
    Ok(certs)
}
