//! HTTPS upstreams: the connector each route's client uses. Routes without
//! `[routes.tls]` share one connector that speaks HTTP and HTTPS (the system's trusted
//! roots, SNI, name verification); a route with its own `ca_file` or
//! `insecure_skip_verify` gets one of its own.

use std::time::Duration;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::{ClientConfig, RootCertStore};

use super::{client_config, TlsError, Trust, Verify};
use crate::config::{UpstreamProtocol, UpstreamTls};

/// The connector of every upstream client: `http://` in the clear, `https://` over TLS.
pub type Connector = HttpsConnector<HttpConnector>;

/// The shared connector; `https` says whether any route that uses it is `https://`
/// (else the system roots are not even read, and any TLS handshake fails).
pub fn shared(https: bool) -> Result<Connector, TlsError> {
    with_protocol(https, UpstreamProtocol::Http1)
}

/// A connector like [`shared`]'s for routes of one `upstream_protocol`: for `"h2"`,
/// TLS offers only ALPN `h2`, so an upstream that cannot speak it fails the handshake
/// (a connect error: nothing was sent) instead of being spoken to in HTTP/1.
pub fn with_protocol(https: bool, protocol: UpstreamProtocol) -> Result<Connector, TlsError> {
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
    Ok(wrap(config, protocol))
}

/// The connector of a route with its own TLS settings; `at` is `routes[i]`.
pub fn for_route(
    at: &str,
    name: &str,
    tls: &UpstreamTls,
    protocol: UpstreamProtocol,
) -> Result<Connector, TlsError> {
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
    Ok(wrap(client_config(&trust, None, verify)?, protocol))
}

fn wrap(config: ClientConfig, protocol: UpstreamProtocol) -> Connector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    http.enforce_http(false);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http();
    match protocol {
        UpstreamProtocol::Http1 => builder.enable_http1().wrap_connector(http),
        // h2c does not negotiate: the client is HTTP/2-only and the connection plain.
        UpstreamProtocol::H2c | UpstreamProtocol::H2 => builder.enable_http2().wrap_connector(http),
    }
}
