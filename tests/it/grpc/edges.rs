//! gRPC at the edges of the gateway, with the real grpcio server of `tests/grpc/`: the
//! names only the gateway sets are dropped from an upstream's trailers as from its
//! headers; a call's `grpc-encoding` is part of its fingerprint (the same bytes under
//! another compression are another message); and the listener's
//! `max_concurrent_requests` refuses a gRPC call with the gRPC status `UNAVAILABLE`, not a 503. Raw calls go
//! through hyper's HTTP/2 client, which sends exactly the bytes given.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpStream;

use crate::support::grpc::{calls, create, grpc_stack_server, metadata};

/// `100 EUR`, gzip-compressed.
const GZIPPED: &str = "1f8b080000000000020333343050700d0d02006fb7e9a207000000";

/// One gRPC message frame: the compressed flag, the length, the bytes.
fn frame(compressed: bool, message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(u8::from(compressed));
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// An h2c connection to `addr`.
async fn connect(addr: SocketAddr) -> http2::SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    send
}

/// A keyed unary `Create` call of tenant `t1` with `body`, under `encoding`.
async fn call(
    send: &mut http2::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    key: &str,
    encoding: Option<&str>,
    body: Bytes,
) -> http::Response<Incoming> {
    let mut request = Request::post(format!("http://{addr}/demo.Payments/Create"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("idempotency-key", key)
        .header("x-tenant-id", "t1");
    if let Some(encoding) = encoding {
        request = request.header("grpc-encoding", encoding);
    }
    send.ready().await.unwrap();
    let request = request.body(Full::new(body)).unwrap();
    send.send_request(request).await.unwrap()
}

/// A call's answer read whole: its headers, message bytes and `grpc-status` (from the
/// trailers, or the headers of a trailers-only answer).
async fn answer(response: http::Response<Incoming>) -> (HeaderMap, Bytes, String) {
    assert_eq!(response.status(), 200, "a gRPC answer is HTTP 200");
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let status = (trailers
        .get("grpc-status")
        .or(parts.headers.get("grpc-status")))
    .map(|v| v.to_str().unwrap().to_string())
    .unwrap_or_default();
    (parts.headers, collected.to_bytes(), status)
}

#[tokio::test]
async fn the_names_only_the_gateway_sets_are_dropped_from_upstream_trailers() {
    let (_redis, _server, _app, target) = grpc_stack_server("", "required = false\n", "5s").await;
    let owned = |key: Value| {
        let mut call = create("", "owned-trailers");
        call["key"] = key;
        call
    };
    // Keyed (its answer stored, then replayed) and unkeyed (streamed through).
    let out = calls(
        &target,
        json!([
            owned(json!("own-1")),
            owned(json!("own-1")),
            owned(Value::Null)
        ]),
    )
    .await;
    for (r, what) in out.iter().zip(["executed", "replayed", "unkeyed"]) {
        assert_eq!(r["code"], "OK", "{what}: {r}");
        assert_eq!(metadata(r, "trailing", "x-kept"), Some("1"), "{what}: {r}");
        for name in ["idempotent-replayed", "idempotency-status"] {
            assert_eq!(metadata(r, "trailing", name), None, "{what}: {name} in {r}");
        }
    }
    // The gateway's own says which was which, in the initial metadata.
    let replayed = |r: &Value| metadata(r, "initial", "idempotent-replayed").map(str::to_string);
    let flags: Vec<_> = out.iter().map(replayed).collect();
    assert_eq!(flags, [Some("false".into()), Some("true".into()), None]);
}

#[tokio::test]
async fn a_retry_under_another_grpc_encoding_is_another_message() {
    let (_redis, server, app, _target) = grpc_stack_server("", "", "5s").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let body = frame(true, &hex::decode(GZIPPED).unwrap());
    let mut send = connect(app.addr).await;
    let first = call(&mut send, app.addr, "enc-1", Some("gzip"), body.clone()).await;
    let (headers, message, status) = answer(first).await;
    assert_eq!(status, "0", "{headers:?}");
    assert_eq!(headers["idempotent-replayed"], "false");
    // The server read the gzip message: `paid:100 EUR:...`.
    assert!(
        message.windows(12).any(|w| w == b"paid:100 EUR"),
        "{message:?}"
    );

    let same = call(&mut send, app.addr, "enc-1", Some("gzip"), body.clone()).await;
    let (headers, replayed, status) = answer(same).await;
    assert_eq!((status.as_str(), &replayed), ("0", &message));
    assert_eq!(headers["idempotent-replayed"], "true");

    // The same bytes said to be deflate: not the request stored for the key.
    let other = call(&mut send, app.addr, "enc-1", Some("deflate"), body).await;
    let (headers, _, status) = answer(other).await;
    assert_eq!(status, "9", "FAILED_PRECONDITION: {headers:?}");
    let message = headers["grpc-message"].to_str().unwrap();
    assert!(message.starts_with("idempotency_key_reused"), "{message}");
    assert_eq!(server.executions(&direct, "enc-1").await, 1);
}

#[tokio::test]
async fn calls_beyond_max_concurrent_requests_get_unavailable_overloaded() {
    let (_redis, server, _app, target) =
        grpc_stack_server("max_concurrent_requests = 1\n", "", "5s").await;
    let direct = format!("127.0.0.1:{}", server.port);
    let mut burst = create("busy-1", "sleep:800:5 EUR");
    burst["parallel"] = json!(4);
    let out = calls(&target, json!([burst])).await;
    let burst = out[0].as_array().unwrap();
    let refused: Vec<&Value> = burst.iter().filter(|r| r["code"] != "OK").collect();
    assert_eq!(refused.len(), 3, "{burst:?}");
    for r in refused {
        assert_eq!(r["code"], "UNAVAILABLE", "{r}");
        let details = r["details"].as_str().unwrap();
        assert!(details.starts_with("overloaded: "), "{details}");
        let pushback = metadata(r, "trailing", "grpc-retry-pushback-ms").or(metadata(
            r,
            "initial",
            "grpc-retry-pushback-ms",
        ));
        assert_eq!(pushback, Some("1000"), "{r}");
    }
    assert_eq!(server.executions(&direct, "busy-1").await, 1);
}
