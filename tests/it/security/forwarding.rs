//! Forwarding headers. From a peer outside `server.trusted_proxies`
//! (by default, every peer) `X-Forwarded-For`, `-Proto` and `-Host` are the gateway's
//! own and `Forwarded` is dropped; from a trusted proxy they are extended or kept.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::support::recorder::{raw, recorded_stack, Received, Recorder};
use crate::support::TestApp;

/// What a front proxy (or a client pretending to be one) sends.
const FRONT: &str = "X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\
                     X-Forwarded-Host: front.example\r\nForwarded: for=203.0.113.9;proto=https";

/// The same headers sent on a pass-through GET and on a keyed POST (the two ways a
/// request is forwarded), with `Host: api.example`; what the upstream got for each.
async fn both_ways(app: &TestApp, upstream: &Recorder, extra: &str) -> [Received; 2] {
    static KEYS: AtomicU32 = AtomicU32::new(0);
    let key = format!(
        "\r\nIdempotency-Key: fwd-{}",
        KEYS.fetch_add(1, Ordering::Relaxed)
    );
    let mut seen = Vec::new();
    for (line, key) in [
        ("GET /v1/payments HTTP/1.1", ""),
        ("POST /v1/payments HTTP/1.1", key.as_str()),
    ] {
        let head = format!("{line}\r\nHost: api.example{key}{extra}");
        assert_eq!(raw(app.addr, &head, "{}").await.status, 201, "{line}");
        let last = upstream.last();
        assert_eq!(last.target, "/v1/payments");
        seen.push(last);
    }
    seen.try_into().unwrap()
}

#[tokio::test]
async fn an_untrusted_peer_cannot_choose_its_forwarding_headers() {
    let (_redis, upstream, app) = recorded_stack(&[], "").await;
    for seen in both_ways(&app, &upstream, &format!("\r\n{FRONT}")).await {
        assert_eq!(
            seen.header("x-forwarded-for"),
            Some("127.0.0.1"),
            "{seen:?}"
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("http"), "{seen:?}");
        assert_eq!(
            seen.header("x-forwarded-host"),
            Some("api.example"),
            "{seen:?}"
        );
        assert_eq!(seen.header("forwarded"), None, "{seen:?}");
    }

    // No Host (HTTP/1.0): the client's X-Forwarded-Host does not stand in for it.
    let head = format!("GET /v1/payments HTTP/1.0\r\n{FRONT}");
    assert_eq!(raw(app.addr, &head, "").await.status, 201);
    let seen = upstream.last();
    assert_eq!(seen.header("x-forwarded-host"), None, "{seen:?}");
    assert_eq!(
        seen.header("x-forwarded-for"),
        Some("127.0.0.1"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_trusted_proxy_has_its_forwarding_headers_extended() {
    let (_redis, upstream, app) = recorded_stack(
        &[],
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"127.0.0.0/8\"]\n",
    )
    .await;
    for seen in both_ways(&app, &upstream, &format!("\r\n{FRONT}")).await {
        assert_eq!(
            seen.header("x-forwarded-for"),
            Some("203.0.113.9, 127.0.0.1"),
            "{seen:?}"
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("https"), "{seen:?}");
        assert_eq!(
            seen.header("x-forwarded-host"),
            Some("front.example"),
            "{seen:?}"
        );
        assert_eq!(
            seen.header("forwarded"),
            Some("for=203.0.113.9;proto=https, for=127.0.0.1"),
            "{seen:?}"
        );
    }
    // What the trusted proxy did not say, the gateway says.
    for seen in both_ways(&app, &upstream, "").await {
        assert_eq!(
            seen.header("x-forwarded-for"),
            Some("127.0.0.1"),
            "{seen:?}"
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("http"), "{seen:?}");
        assert_eq!(
            seen.header("x-forwarded-host"),
            Some("api.example"),
            "{seen:?}"
        );
        assert_eq!(seen.header("forwarded"), None, "{seen:?}");
    }
}

#[tokio::test]
async fn a_peer_outside_the_trusted_networks_is_not_trusted() {
    let (_redis, upstream, app) = recorded_stack(
        &[],
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n",
    )
    .await;
    for seen in both_ways(&app, &upstream, &format!("\r\n{FRONT}")).await {
        assert_eq!(
            seen.header("x-forwarded-for"),
            Some("127.0.0.1"),
            "{seen:?}"
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("http"), "{seen:?}");
        assert_eq!(seen.header("forwarded"), None, "{seen:?}");
    }
}
