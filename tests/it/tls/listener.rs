//! TLS on the proxy listener (`[server.tls]`) with a private CA: curl gets HTTP/2 or
//! HTTP/1.1 on one port by ALPN, a keyed POST executes once and replays over both, and
//! the upstream is told `X-Forwarded-Proto: https`; a client that does not trust the CA
//! fails its handshake; clients that stay silent before, during or after the handshake
//! are closed after `server.header_read_timeout`; TLS connections take
//! `max_connections` slots and meet `write_timeout`. Reloading the certificate (SIGHUP,
//! changed files) and `check-config` are in `reload.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::support::raw::{big_upstream, connect_small, BIG};
use crate::support::{
    closed_within, config, curl_head, eventually, read_until_closed, stack, Pki, RedisServer,
    TestApp,
};

/// `[server]` settings, then `[server.tls]` presenting `pki.server`.
pub fn tls_extra(pki: &Pki, server: &str) -> String {
    format!(
        "[server]\n{server}\n[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        pki.server.cert.display(),
        pki.server.key.display()
    )
}

/// `https://localhost:<port><path>` for the app's proxy listener.
fn https(app: &TestApp, path: &str) -> String {
    format!("https://localhost:{}{path}", app.addr.port())
}

/// Runs curl against `app` (`localhost` resolved to its address) with `args`; the
/// output is the response head then `<http_version> <http_code>`.
async fn curl(app: &TestApp, args: &[&str]) -> std::process::Output {
    let resolve = format!("localhost:{}:127.0.0.1", app.addr.port());
    let head = ["--max-time", "10", "--resolve", &resolve];
    curl_head(&[&head[..], args].concat()).await
}

/// curl's output when it succeeded, lowercased.
async fn curl_ok(app: &TestApp, args: &[&str]) -> String {
    let out = curl(app, args).await;
    assert!(out.status.success(), "curl failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().to_ascii_lowercase()
}

/// A rustls client trusting `ca`, offering `alpn`.
fn connector(ca: &std::path::Path, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(idemgate::testing::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to the app, its handshake done with ALPN `alpn`.
async fn handshake(pki: &Pki, alpn: &[&[u8]], tcp: TcpStream) -> TlsStream<TcpStream> {
    let name = ServerName::try_from("localhost").unwrap();
    connector(&pki.ca, alpn).connect(name, tcp).await.unwrap()
}

/// Whether the peer closes `stream` within `within` (what it sends is read and dropped).
const KEYED: [&str; 8] = [
    "-X",
    "POST",
    "-H",
    "Idempotency-Key: tls-both",
    "-H",
    "Content-Type: application/json",
    "--data",
    "{\"n\":1}",
];

#[tokio::test]
async fn curl_gets_http2_and_http1_by_alpn_on_one_tls_port_and_a_key_executes_once() {
    let pki = Pki::generate();
    let (_redis, upstream, app) = stack(&tls_extra(&pki, "")).await;
    let (ca, url) = (pki.ca.to_str().unwrap(), https(&app, "/v1/payments"));
    let h2 = curl_ok(
        &app,
        &[&["--cacert", ca, "--http2"], &KEYED[..], &[&url]].concat(),
    )
    .await;
    assert!(h2.ends_with("2 201"), "{h2}");
    assert!(h2.contains("idempotent-replayed: false"), "{h2}");
    let h1 = curl_ok(
        &app,
        &[&["--cacert", ca, "--http1.1"], &KEYED[..], &[&url]].concat(),
    )
    .await;
    assert!(h1.ends_with("1.1 201"), "{h1}");
    assert!(h1.contains("idempotent-replayed: true"), "{h1}");
    let again = curl_ok(
        &app,
        &[&["--cacert", ca, "--http2"], &KEYED[..], &[&url]].concat(),
    )
    .await;
    assert!(again.ends_with("2 201"), "{again}");
    assert!(again.contains("idempotent-replayed: true"), "{again}");
    assert_eq!(upstream.executions(), 1, "both retries were replays");
    // The upstream is told the client spoke HTTPS, and to which host (over HTTP/2, the
    // `:authority`: curl sends no `Host` there); unkeyed requests too, on both protocols.
    let keyed = &upstream.seen()[0].headers;
    assert_eq!(keyed["x-forwarded-proto"], "https", "{keyed:?}");
    let host = format!("localhost:{}", app.addr.port());
    let ping = https(&app, "/v1/ping");
    for version in ["--http2", "--http1.1"] {
        let out = curl_ok(&app, &["--cacert", ca, version, "-X", "POST", &ping]).await;
        assert!(out.ends_with(" 201"), "{out}");
        let seen = upstream.seen().pop().unwrap().headers;
        assert_eq!(seen["x-forwarded-proto"], "https", "{version}: {seen:?}");
        assert_eq!(
            seen["x-forwarded-host"],
            host.as_str(),
            "{version}: {seen:?}"
        );
    }

    // TLS only on the proxy listener: plain HTTP and h2c get no answer there.
    let plain = format!("http://localhost:{}/v1/ping", app.addr.port());
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        let out = curl(&app, &[version, &plain]).await;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            !text.contains(" 201"),
            "{version} in the clear was served: {text}"
        );
    }
    // The admin listener stays plain HTTP.
    let admin = format!("http://{}/healthz", app.admin);
    let healthz = curl_ok(&app, &["--http1.1", &admin]).await;
    assert!(healthz.ends_with("1.1 200"), "{healthz}");
    assert_eq!(upstream.executions(), 3);
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_fails_the_handshake() {
    let pki = Pki::generate();
    let (_redis, upstream, app) = stack(&tls_extra(&pki, "")).await;
    let url = https(&app, "/v1/ping");
    for trust in [
        vec!["--cacert", pki.other_ca.to_str().unwrap()],
        vec![], // the system's roots
    ] {
        let out = curl(&app, &[&trust[..], &[&url]].concat()).await;
        // 60: the peer's certificate cannot be authenticated with the known CAs.
        assert_eq!(out.status.code(), Some(60), "{trust:?}: {out:?}");
    }
    // A rustls client trusting another CA fails too, and nothing was forwarded.
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let refused = connector(&pki.other_ca, &[b"h2"]).connect(name, tcp).await;
    assert!(refused.is_err(), "handshake with an untrusted CA succeeded");
    assert_eq!(upstream.executions(), 0);

    // The listener goes on serving clients that trust its CA.
    let ok = curl_ok(&app, &["--cacert", pki.ca.to_str().unwrap(), &url]).await;
    assert!(ok.ends_with(" 201"), "{ok}");
}

#[tokio::test]
async fn silent_and_stalled_tls_clients_are_closed_after_header_read_timeout() {
    let pki = Pki::generate();
    let extra = tls_extra(&pki, "header_read_timeout = \"500ms\"");
    let (_redis, _upstream, app) = stack(&extra).await;
    let started = Instant::now();
    // No ClientHello at all.
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    // Part of a ClientHello (a TLS record header promising more).
    let mut partial = TcpStream::connect(app.addr).await.unwrap();
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    // Handshakes done, then nothing: no HTTP/2 preface, no HTTP/1.1 request head.
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let mut h2 = handshake(&pki, &[b"h2"], tcp).await;
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let mut h1 = handshake(&pki, &[b"http/1.1"], tcp).await;
    assert_eq!(h1.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let mut no_alpn = handshake(&pki, &[], tcp).await;

    for (name, closed) in [
        (
            "silent",
            closed_within(&mut silent, Duration::from_secs(5)).await,
        ),
        (
            "partial ClientHello",
            closed_within(&mut partial, Duration::from_secs(5)).await,
        ),
        (
            "h2 without preface",
            closed_within(&mut h2, Duration::from_secs(5)).await,
        ),
        (
            "http/1.1 without head",
            closed_within(&mut h1, Duration::from_secs(5)).await,
        ),
        (
            "no ALPN, no head",
            closed_within(&mut no_alpn, Duration::from_secs(5)).await,
        ),
    ] {
        assert!(closed, "{name} still open");
    }
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "closed before the timeout"
    );
}

#[tokio::test]
async fn tls_connections_take_max_connections_slots() {
    let pki = Pki::generate();
    let extra = tls_extra(&pki, "max_connections = 1\nheader_read_timeout = \"30s\"");
    let (_redis, _upstream, app) = stack(&extra).await;
    // One TLS connection, handshake done, idle: it holds the only slot.
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let held = handshake(&pki, &[b"http/1.1"], tcp).await;
    let (ca, url) = (pki.ca.to_str().unwrap(), https(&app, "/v1/ping"));
    let out = curl(&app, &["--cacert", ca, "--max-time", "1", &url]).await;
    assert_eq!(
        out.status.code(),
        Some(28),
        "served beyond max_connections: {out:?}"
    );
    drop(held);
    let ok = curl_ok(&app, &["--cacert", ca, &url]).await;
    assert!(ok.ends_with(" 201"), "{ok}");
    assert!(app.limited("max_connections").await >= 1.0);
}

#[tokio::test]
async fn a_tls_client_that_does_not_read_is_cut_off_by_write_timeout() {
    let pki = Pki::generate();
    let redis = RedisServer::start();
    let (upstream, _executions) = big_upstream().await;
    let extra = tls_extra(
        &pki,
        "max_request_body = \"64KiB\"\nmax_response_body = \"8MiB\"\n\
         buffer_budget = \"9MiB\"\nwrite_timeout = \"1s\"",
    );
    let app = TestApp::spawn(config(&redis.url(), &format!("http://{upstream}"), &extra)).await;
    let tcp = connect_small(app.addr).await;
    let mut stalled = handshake(&pki, &[b"http/1.1"], tcp).await;
    let request = "POST /v1/payments HTTP/1.1\r\nHost: localhost\r\nIdempotency-Key: big\r\n\
                   Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    // The counter is the test process's (one metrics recorder for every gateway in it),
    // so other tests' clients cut by write_timeout count too: this one's is the rise,
    // and the cut itself is read on the socket.
    let before = app.limited("write_timeout").await;
    stalled.write_all(request.as_bytes()).await.unwrap();
    stalled.flush().await.unwrap();
    // The client reads nothing; the gateway's encrypted writes stall, then time out.
    // Real time: past the write timeout (the counter is the process's, so it alone
    // cannot tell that this connection's fired).
    tokio::time::sleep(Duration::from_secs(1) + Duration::from_millis(1500)).await;
    let fired = async || app.limited("write_timeout").await >= before + 1.0;
    let fired = eventually(Duration::from_secs(10), fired).await;
    assert!(fired, "write_timeout never fired under TLS");
    let (got, ended) = read_until_closed(&mut stalled, Duration::from_secs(5)).await;
    assert!(ended, "still open after {got} bytes");
    assert!(got < BIG, "the whole response arrived ({got} bytes)");
}
