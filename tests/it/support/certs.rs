//! Certificates generated for the TLS tests (rcgen): a CA, a server certificate for
//! `localhost` and `127.0.0.1`, a client certificate, a server certificate for the
//! wrong name (signed by the same CA), and a server certificate from a CA nobody
//! trusts. PEM files in a temporary directory, plus rustls server configurations for
//! test servers.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tempfile::TempDir;

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Pki {
    _dir: TempDir,
    /// The CA the gateway is told to trust.
    pub ca: PathBuf,
    /// `localhost`, `127.0.0.1`, signed by `ca`.
    pub server: Pair,
    /// `wrong.example` only, signed by `ca`.
    pub wrong_name: Pair,
    /// `localhost`, `127.0.0.1`, signed by another CA.
    pub untrusted: Pair,
    /// A client certificate signed by `ca`.
    pub client: Pair,
    /// The other CA (for tests that trust the wrong one).
    pub other_ca: PathBuf,
}

impl Pki {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let (ca_pem, ca) = authority("idemgate test CA");
        let (other_pem, other) = authority("somebody else's CA");
        let leaf = |name: &str, sans: &[&str], issuer: &Issuer<'_, KeyPair>| {
            let key = KeyPair::generate().unwrap();
            let params =
                CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            let cert = params.signed_by(&key, issuer).unwrap();
            Pair {
                cert: write(&format!("{name}.crt"), cert.pem()),
                key: write(&format!("{name}.key"), key.serialize_pem()),
            }
        };
        let server = leaf("server", &["localhost", "127.0.0.1"], &ca);
        let wrong_name = leaf("wrong", &["wrong.example"], &ca);
        let untrusted = leaf("untrusted", &["localhost", "127.0.0.1"], &other);
        let client = leaf("client", &["idemgate-client"], &ca);
        Self {
            ca: write("ca.crt", ca_pem),
            other_ca: write("other-ca.crt", other_pem),
            server,
            wrong_name,
            untrusted,
            client,
            _dir: dir,
        }
    }

    /// A rustls server configuration presenting `pair`.
    pub fn server_config(pair: &Pair) -> Arc<rustls::ServerConfig> {
        let certs = CertificateDer::pem_file_iter(&pair.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&pair.key).unwrap();
        let config =
            rustls::ServerConfig::builder_with_provider(idemgate::testing::tls::provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap();
        Arc::new(config)
    }
}

/// A self-signed CA: its PEM and an issuer for leaves.
fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}
