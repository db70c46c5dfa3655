//! Headers only the gateway may set. A client can neither send one
//! upstream (`Idempotency-Fencing-Token` on a request that holds no lease) nor, by
//! naming it in `Connection`, strip one the gateway added; an upstream cannot answer
//! a client with `Idempotent-Replayed` or `Idempotency-Status`.

use crate::support::recorder::{raw, recorded_stack};

const FORGED: &str = "Idempotency-Fencing-Token: 999999999\r\n\
                      Idempotency-Status: acquired\r\nIdempotent-Replayed: true";

#[tokio::test]
async fn clients_cannot_forge_gateway_owned_request_headers() {
    let (mut redis, upstream, app) = recorded_stack(
        &[],
        "[idempotency]\non_redis_unavailable = \"pass_through\"\n",
    )
    .await;
    let host = format!("Host: {}", app.addr);
    let requests = [
        (
            "GET /v1/payments HTTP/1.1",
            "pass-through (method not covered)",
        ),
        ("POST /v1/payments HTTP/1.1", "unkeyed"),
    ];
    for (line, what) in requests {
        let answer = raw(app.addr, &format!("{line}\r\n{host}\r\n{FORGED}"), "{}").await;
        assert_eq!(answer.status, 201, "{what}");
        let seen = upstream.last();
        for owned in [
            "idempotency-fencing-token",
            "idempotency-status",
            "idempotent-replayed",
        ] {
            assert_eq!(
                seen.header(owned),
                None,
                "{what}: the client's {owned} reached the upstream"
            );
        }
    }

    // A keyed request with a lease: the upstream gets the gateway's token, not the client's.
    let head = format!("POST /v1/payments HTTP/1.1\r\n{host}\r\nIdempotency-Key: k1\r\n{FORGED}");
    assert_eq!(raw(app.addr, &head, "{}").await.status, 201);
    let fence = upstream.last();
    let fence = fence.header("idempotency-fencing-token");
    assert!(fence.is_some_and(|t| t != "999999999"), "keyed: {fence:?}");

    // Redis gone: the keyed request is forwarded without a lease, so without a token.
    redis.stop();
    let head = format!("POST /v1/payments HTTP/1.1\r\n{host}\r\nIdempotency-Key: k2\r\n{FORGED}");
    let answer = raw(app.addr, &head, "{}").await;
    assert_eq!(answer.status, 201);
    assert_eq!(answer.headers["idempotency-status"], "bypassed");
    assert_eq!(answer.body, b"{}", "the upstream's answer");
    let seen = upstream.last();
    assert_eq!(
        seen.header("idempotency-fencing-token"),
        None,
        "bypassed: the client's token reached the upstream"
    );
    assert_eq!(upstream.received().len(), 4);
}

#[tokio::test]
async fn connection_cannot_strip_what_the_gateway_adds() {
    let (_redis, upstream, app) = recorded_stack(&[], "").await;
    let host = format!("Host: {}", app.addr);
    // Both named hop-by-hop: the client's copies are dropped on arrival, and the
    // gateway's own are added after, so they reach the upstream.
    let head = format!(
        "POST /v1/payments HTTP/1.1\r\n{host}\r\nIdempotency-Key: k1\r\n\
         Connection: idempotency-fencing-token, x-request-id\r\n\
         X-Request-Id: from-the-client\r\nIdempotency-Fencing-Token: 1"
    );
    let answer = raw(app.addr, &head, "{}").await;
    assert_eq!(answer.status, 201);
    let seen = upstream.last();
    let token: u64 = (seen.header("idempotency-fencing-token"))
        .expect("the gateway's fencing token was stripped")
        .parse()
        .unwrap();
    assert_ne!(token, 1, "the client's token reached the upstream");
    let id = seen
        .header("x-request-id")
        .expect("the gateway's X-Request-Id was stripped");
    assert_eq!(
        answer.headers["x-request-id"], id,
        "one id for client and upstream"
    );

    // Named in `Connection` on a pass-through request too.
    let head =
        format!("GET /v1/payments HTTP/1.1\r\n{host}\r\nConnection: x-request-id, x-forwarded-for");
    let answer = raw(app.addr, &head, "").await;
    assert_eq!(answer.status, 201);
    let seen = upstream.last();
    assert_eq!(
        seen.header("x-request-id"),
        answer.headers["x-request-id"].to_str().ok()
    );
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));

    // A sane client id is kept when it is an ordinary end-to-end header.
    let head = format!("GET /v1/payments HTTP/1.1\r\n{host}\r\nX-Request-Id: client-7");
    raw(app.addr, &head, "").await;
    assert_eq!(upstream.last().header("x-request-id"), Some("client-7"));
}

#[tokio::test]
async fn upstreams_cannot_forge_gateway_owned_response_headers() {
    let (_redis, _upstream, app) = recorded_stack(
        &[
            ("idempotent-replayed", "true"),
            ("idempotency-status", "bypassed"),
            ("x-kept", "1"),
        ],
        "",
    )
    .await;
    let r = app
        .client
        .get(app.url("/v1/payments"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["x-kept"], "1");
    assert!(
        r.headers().get("idempotent-replayed").is_none(),
        "pass-through: the upstream's Idempotent-Replayed reached the client"
    );
    assert!(r.headers().get("idempotency-status").is_none());

    for replayed in ["false", "true"] {
        let r = app.post("k", "{}").send().await.unwrap();
        assert_eq!(r.status(), 201);
        let values: Vec<_> = r.headers().get_all("idempotent-replayed").iter().collect();
        assert_eq!(values, [replayed], "keyed");
        assert!(
            r.headers().get("idempotency-status").is_none(),
            "keyed ({replayed}): the upstream's Idempotency-Status was stored and sent"
        );
    }
}
