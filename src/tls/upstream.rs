//! HTTPS upstreams: the connector each route's client uses. Routes without
//! `[routes.tls]` share one connector that speaks HTTP and HTTPS (the system's trusted
//! roots, SNI, name verification); a route with its own `ca_file` or
//! `insecure_skip_verify` gets one of its own.

use std::time::Duration;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::{ClientConfig, RootCertStore};

use super::{client_config, TlsError, Trust, Verify};
use crate::config::UpstreamTls;

/// The connector of every upstream client: `http://` in the clear, `https://` over TLS.
pub type Connector = HttpsConnector<HttpConnector>;

/// The shared connector; `https` says whether any route that uses it is `https://`
/// (else the system roots are not even read, and any TLS handshake fails).
pub fn shared(https: bool) -> Result<Connector, TlsError> {
    let config = if https {
        let trust = Trust {
            key: "routes.upstream",
            ca_file: None,
        };
        client_config(&trust, None, Verify::Full)?
    } else {
        ClientConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new("routes.upstream", e.to_string()))?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth()
    };
    Ok(wrap(config))
}

/// The connector of a route with its own TLS settings; `at` is `routes[i]`.
pub fn for_route(at: &str, name: &str, tls: &UpstreamTls) -> Result<Connector, TlsError> {
    let key = format!("{at}.tls.ca_file");
    let trust = Trust {
        key: &key,
        ca_file: tls.ca_file.as_deref(),
    };
    let verify = if tls.insecure_skip_verify {
        tracing::warn!(
            route = name,
            "routes.tls.insecure_skip_verify = true: the certificate of this route's upstream \
             is NOT verified, so anyone on the network path can read and change its traffic; \
             for test environments only"
        );
        Verify::Nothing
    } else {
        Verify::Full
    };
    Ok(wrap(client_config(&trust, None, verify)?))
}

fn wrap(config: ClientConfig) -> Connector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    http.enforce_http(false);
    HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}
