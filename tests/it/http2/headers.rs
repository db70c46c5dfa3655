//! An HTTP/2 request reaches an HTTP/1.1 upstream as its HTTP/1.1 form would: its
//! `:authority` is the host `X-Forwarded-Host` names (an HTTP/2 client sends no
//! `Host`), and its `cookie` fields, which HTTP/2 clients split (RFC 9113 section
//! 8.2.3), arrive joined into one; that one value is also what a `cookie` scope
//! hashes, so an HTTP/2 client and an HTTP/1.1 client with the same cookies share a
//! scope.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::support::recorder::{raw, recorded_stack};

/// A JSON POST (keyed when `key` is) or a GET to `/v1/payments` with `:authority`
/// `api.example:8443` and one `cookie` field per entry of `cookies`.
fn request(key: Option<&str>, cookies: &[&'static str]) -> Request<Full<Bytes>> {
    let method = if key.is_some() { "POST" } else { "GET" };
    let mut request = Request::builder()
        .method(method)
        .uri("http://api.example:8443/v1/payments")
        .header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    for cookie in cookies {
        request = request.header("cookie", *cookie);
    }
    request.body(Full::new(Bytes::from_static(b"{}"))).unwrap()
}

/// Sends `request` as the one stream of a new h2c connection to `addr`: the answer's
/// status and headers.
async fn h2(addr: SocketAddr, request: Request<Full<Bytes>>) -> (u16, HeaderMap) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = send.send_request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    (response.status().as_u16(), response.headers().clone())
}

#[tokio::test]
async fn the_authority_is_the_forwarded_host_and_split_cookies_arrive_as_one() {
    let (_redis, upstream, app) = recorded_stack(&[], "").await;
    for key in [None, Some("h2-host-1")] {
        let (status, _) = h2(app.addr, request(key, &["a=1", "b=2"])).await;
        assert_eq!(status, 201, "{key:?}");
        let seen = upstream.last();
        assert_eq!(
            seen.header("host"),
            Some(upstream.addr.to_string().as_str())
        );
        assert_eq!(
            seen.header("x-forwarded-host"),
            Some("api.example:8443"),
            "{key:?}: {seen:?}"
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("http"), "{seen:?}");
        // `header` panics on a second field: one, joined as RFC 9113 says.
        assert_eq!(seen.header("cookie"), Some("a=1; b=2"), "{key:?}: {seen:?}");
    }
    assert_eq!(upstream.received().len(), 2);
}

#[tokio::test]
async fn split_cookies_make_the_same_scope_as_one_cookie_header() {
    let scoped = "[idempotency]\nscope_headers = [\"cookie\"]\nanonymous = \"reject\"\n";
    let (_redis, upstream, app) = recorded_stack(&[], scoped).await;
    // Split over HTTP/2: one scope, not a scope header sent twice (400).
    let (status, headers) = h2(app.addr, request(Some("ck-1"), &["sid=s1", "theme=dark"])).await;
    assert_eq!(status, 201, "{headers:?}");
    assert_eq!(headers["idempotent-replayed"], "false");
    // The same cookies in one HTTP/1.1 header: the same scope, so the same record.
    let head = |cookie: &str| {
        format!(
            "POST /v1/payments HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: ck-1\r\n\
             Content-Type: application/json\r\nCookie: {cookie}"
        )
    };
    let retry = raw(app.addr, &head("sid=s1; theme=dark"), "{}").await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(
        upstream.received().len(),
        1,
        "the HTTP/1.1 retry was a replay"
    );
    // Another session's same key is another tenant's: it runs.
    let other = raw(app.addr, &head("sid=s2; theme=dark"), "{}").await;
    assert_eq!(other.headers["idempotent-replayed"], "false");
    assert_eq!(upstream.received().len(), 2);
}
