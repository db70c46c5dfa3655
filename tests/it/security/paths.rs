//! Routing on the raw path. Dot segments, encoded separators and
//! empty segments are refused before routing (400 `invalid_path`, nothing forwarded);
//! escaped unreserved characters are decoded before routing, and prefixes cover
//! whole segments, so a client cannot pick another route's policy by spelling.

use crate::support::problem_code;
use crate::support::recorder::{raw, recorded_stack};

/// Besides the default `/v1/` route (keys optional), `/v1/pay` requires a key.
const STRICT: &str = "[[routes]]\nname = \"strict\"\npath_prefix = \"/v1/pay\"\n\
                      upstream = \"http://127.0.0.1:1\"\nupstream_timeout = \"5s\"\n\
                      [routes.idempotency]\nrequired = true\n";

#[tokio::test]
async fn dot_segments_and_encoded_separators_are_refused_before_routing() {
    let (_redis, upstream, app) = recorded_stack(&[], "").await;
    let bad = [
        "/v1/../internal",
        "/v1/./payments",
        "/v1/..",
        "/v1/%2e%2e/internal",
        "/v1/%2E%2E/internal",
        "/v1/.%2e/internal",
        "/v1/%2e/payments",
        "/v1/..;/internal",
        "/v1//payments",
        "//v1/payments",
        "/v1/a%2fb",
        "/v1/a%2Fb",
        "/v1/a%5cb",
        "/v1\\..\\internal",
        "/v1/%zz",
    ];
    for path in bad {
        for (method, key) in [("GET", ""), ("POST", "\r\nIdempotency-Key: p")] {
            let head = format!("{method} {path} HTTP/1.1\r\nHost: x{key}");
            let answer = raw(app.addr, &head, "{}").await;
            assert_eq!(answer.status, 400, "{method} {path}");
            assert_eq!(
                problem_code(&answer.headers, &answer.body),
                "invalid_path",
                "{method} {path}"
            );
            let detail = String::from_utf8_lossy(&answer.body);
            assert!(
                !detail.contains(path),
                "the problem echoes the path: {detail}"
            );
        }
    }
    assert_eq!(
        upstream.received().len(),
        0,
        "forwarded: {:?}",
        upstream.received()
    );

    // A query is not a path: anything goes there.
    let answer = raw(
        app.addr,
        "GET /v1/payments?next=/../%2e%2e//%2f HTTP/1.1\r\nHost: x",
        "",
    )
    .await;
    assert_eq!(answer.status, 201);
    assert_eq!(upstream.last().target, "/v1/payments?next=/../%2e%2e//%2f");
}

#[tokio::test]
async fn spelling_cannot_choose_a_laxer_route() {
    let (_redis, upstream, app) = recorded_stack(&[], STRICT).await;
    // Each of these is `/v1/pay...` to an upstream that decodes or drops `;params`:
    // the route that requires a key must answer, not the one that does not.
    let cases = [
        ("/v1/p%61y", "idempotency_key_missing"),
        ("/v%31/pay/1", "idempotency_key_missing"),
        ("/v1/pay;x=1", "idempotency_key_missing"),
        ("/v1/%70ay/%7E", "idempotency_key_missing"),
        ("/v1/pay%2f1", "invalid_path"),
    ];
    for (path, expected) in cases {
        let head = format!("POST {path} HTTP/1.1\r\nHost: x");
        let answer = raw(app.addr, &head, "{}").await;
        assert_eq!(answer.status, 400, "{path}");
        assert_eq!(
            problem_code(&answer.headers, &answer.body),
            expected,
            "{path}"
        );
    }
    assert_eq!(upstream.received().len(), 0, "{:?}", upstream.received());

    // Prefixes cover whole segments: `/v1/payments` is not under `/v1/pay`.
    let answer = raw(app.addr, "POST /v1/payments HTTP/1.1\r\nHost: x", "{}").await;
    assert_eq!(answer.status, 201, "/v1/payments went to the strict route");

    // What is routed is what is forwarded: the decoded path.
    let head = "POST /v1/p%61yments/%7Eme?q=%31 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k";
    assert_eq!(raw(app.addr, head, "{}").await.status, 201);
    assert_eq!(upstream.last().target, "/v1/payments/~me?q=%31");
}
