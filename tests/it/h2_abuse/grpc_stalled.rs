//! A stalled gRPC reader: a keyed unary call (first execution, then its replay) on a
//! connection whose stream window is 0, PINGs answered. Its answer ends with trailers
//! and is buffered like any other: the send watchdog must free it after
//! `write_timeout` and GOAWAY, then close, the connection.

use std::time::{Duration, Instant};

use crate::support::grpc::grpc_stack_server;
use crate::support::h2wire::{data, request, Held, Seen, INITIAL_WINDOW_SIZE};

const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// A keyed `Create` call on stream 1 with `message`, the client's side closed.
fn create(key: &str, message: &[u8]) -> Vec<u8> {
    let fields = [
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("idempotency-key", key),
        ("x-tenant-id", "t1"),
    ];
    let mut frames = request(1, "POST", "/demo.Payments/Create", &fields);
    let mut framed = vec![0u8];
    framed.extend((message.len() as u32).to_be_bytes());
    framed.extend(message);
    frames.extend(data(1, &framed, true));
    frames
}

#[tokio::test]
async fn a_stalled_grpc_reader_is_cut_off_by_the_send_watchdog() {
    let server = "write_timeout = \"2s\"\nhttp2_keep_alive_interval = \"500ms\"\n\
                  http2_keep_alive_timeout = \"5s\"\n";
    let (_redis, _grpc, app, _) = grpc_stack_server(server, "", "5s").await;
    // The first execution, then its replay, each to a client that takes none of it.
    for what in ["first execution", "replay"] {
        let start = Instant::now();
        let conn = Held::open(app.addr, &[(INITIAL_WINDOW_SIZE, 0)]).await;
        conn.send(&create("stalled-grpc", b"stalled"))
            .await
            .unwrap();
        let bound = WRITE_TIMEOUT + Duration::from_secs(3);
        let goaway = conn.goaway_by(start + bound).await;
        let (at, _) = goaway.unwrap_or_else(|| {
            panic!(
                "{what}: a gRPC answer its client could take none of got no GOAWAY within \
                 {bound:?} (answers {:?}, PINGs answered {}, closed {:?})",
                conn.seen.statuses(),
                Seen::n(&conn.seen.pings),
                conn.closed().map(|t| t - start),
            )
        });
        assert_eq!(Seen::n(&conn.seen.ok), 1, "{what}: answered 200 (gRPC)");
        let closed = conn
            .closed_by(at + WRITE_TIMEOUT + Duration::from_secs(2))
            .await;
        assert!(closed.is_some(), "{what}: still open after its GOAWAY");
        assert_eq!(Seen::n(&conn.seen.data), 0);
    }
}
