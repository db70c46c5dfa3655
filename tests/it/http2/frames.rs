//! The `server.http2_*` settings seen on the wire: the raw HTTP/2 client of
//! `tests/support/src/h2wire.rs` writes frames by hand (as an abusive client would: no flow control,
//! no limits obeyed) and reads what the gateway announces and how it closes a connection
//! it refuses to serve.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::closed_within;
use crate::support::h2wire::{
    frame, get, goaway, next, CANCEL, ENHANCE_YOUR_CALM, GOAWAY, HEADERS, PING, PREFACE,
    RST_STREAM, SETTINGS, WINDOW_UPDATE,
};
use crate::support::{read, stack, TestApp};

/// A connection to the gateway that has sent the preface and an empty SETTINGS frame.
async fn open(app: &TestApp) -> TcpStream {
    crate::support::h2wire::open(app.addr).await
}

/// The gateway's first SETTINGS frame as (identifier, value) pairs, and the increment of
/// the connection window that follows it (0 when none was sent).
async fn announced(stream: &mut TcpStream) -> (Vec<(u16, u32)>, u32) {
    let (kind, _, payload) = next(stream).await.unwrap();
    assert_eq!(kind, SETTINGS);
    let settings = (payload.chunks(6))
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes(c[2..6].try_into().unwrap()),
            )
        })
        .collect();
    let mut window = 0;
    let frames = async {
        while let Some((kind, id, payload)) = next(stream).await {
            if kind == WINDOW_UPDATE && id == 0 {
                return u32::from_be_bytes(payload[..4].try_into().unwrap());
            }
        }
        0
    };
    if let Ok(increment) = tokio::time::timeout(Duration::from_millis(500), frames).await {
        window = increment;
    }
    (settings, window)
}

#[tokio::test]
async fn the_gateway_announces_its_http2_settings() {
    let (_redis, _upstream, app) = stack(
        "[server]\nmax_header_size = \"12KiB\"\nhttp2_max_concurrent_streams = 7\n\
         http2_initial_stream_window = \"128KiB\"\nhttp2_initial_connection_window = \"3MiB\"\n",
    )
    .await;
    let mut stream = open(&app).await;
    let (settings, window) = announced(&mut stream).await;
    let setting = |id| settings.iter().find(|(i, _)| *i == id).map(|(_, v)| *v);
    assert_eq!(
        setting(0x3),
        Some(7),
        "SETTINGS_MAX_CONCURRENT_STREAMS: {settings:?}"
    );
    assert_eq!(
        setting(0x4),
        Some(128 << 10),
        "SETTINGS_INITIAL_WINDOW_SIZE"
    );
    assert_eq!(
        setting(0x6),
        Some(12 << 10),
        "SETTINGS_MAX_HEADER_LIST_SIZE"
    );
    assert_eq!(
        window,
        (3 << 20) - 65_535,
        "the connection window, raised from 65535"
    );
}

/// After a flood on one connection, another connection is still served.
async fn others_still_served(app: &TestApp) {
    let (status, _, _) = read(app.post("after-flood", "{}").send().await.unwrap()).await;
    assert_eq!(status, 201);
}

/// Reads frames until the response HEADERS of stream `id` (true) or a GOAWAY (false).
async fn answered(stream: &mut TcpStream, id: u32) -> bool {
    let read = async {
        while let Some((kind, on, _)) = next(stream).await {
            match kind {
                HEADERS if on == id => return true,
                GOAWAY => return false,
                _ => {}
            }
        }
        false
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or(false)
}

#[tokio::test]
async fn a_rapid_reset_flood_gets_goaway_enhance_your_calm() {
    let (_redis, _upstream, app) =
        stack("[server]\nhttp2_max_pending_accept_reset_streams = 5\n").await;
    // Below the limit, resets are harmless: the connection goes on.
    let mut few = open(&app).await;
    for i in 0..4u32 {
        few.write_all(&get(2 * i + 1, true)).await.unwrap();
        let cancel = frame(RST_STREAM, 0, 2 * i + 1, &CANCEL.to_be_bytes());
        few.write_all(&cancel).await.unwrap();
    }
    few.write_all(&get(9, true)).await.unwrap();
    assert!(answered(&mut few, 9).await, "the fifth stream is answered");

    let mut stream = open(&app).await;
    let mut flood = Vec::new();
    for i in 0..1000u32 {
        flood.extend(get(2 * i + 1, true));
        flood.extend(frame(RST_STREAM, 0, 2 * i + 1, &CANCEL.to_be_bytes()));
    }
    // The gateway may close before reading it all.
    let _ = stream.write_all(&flood).await;
    assert_eq!(goaway(&mut stream).await, Some(ENHANCE_YOUR_CALM));
    others_still_served(&app).await;
}

#[tokio::test]
async fn streams_the_client_makes_the_gateway_reset_get_goaway_enhance_your_calm() {
    let (_redis, _upstream, app) =
        stack("[server]\nhttp2_max_local_error_reset_streams = 5\n").await;
    let mut stream = open(&app).await;
    let mut flood = Vec::new();
    // A request without `:path` is malformed, a stream error: the gateway resets it.
    for i in 0..200u32 {
        flood.extend(frame(HEADERS, 0x5, 2 * i + 1, &[0x82, 0x86]));
    }
    let _ = stream.write_all(&flood).await;
    assert_eq!(goaway(&mut stream).await, Some(ENHANCE_YOUR_CALM));
    others_still_served(&app).await;
}

#[tokio::test]
async fn a_peer_that_does_not_answer_pings_is_disconnected() {
    let (_redis, _upstream, app) = stack(
        "[server]\nhttp2_keep_alive_interval = \"200ms\"\nhttp2_keep_alive_timeout = \"300ms\"\n",
    )
    .await;
    let mut stream = open(&app).await;
    let mut pinged = false;
    let watch = async {
        while let Some((kind, _, _)) = next(&mut stream).await {
            pinged |= kind == PING;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("the connection is closed once a ping goes unanswered");
    assert!(pinged, "the gateway pinged first");
}

/// Whether the gateway closes `stream` within `within`, reading and dropping what it sends.
#[tokio::test]
async fn silent_connections_and_partial_prefaces_are_closed_after_header_read_timeout() {
    let (_redis, _upstream, app) = stack("[server]\nheader_read_timeout = \"500ms\"\n").await;
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let mut partial = TcpStream::connect(app.addr).await.unwrap();
    partial.write_all(&PREFACE[..10]).await.unwrap();
    let mut h1_partial = TcpStream::connect(app.addr).await.unwrap();
    h1_partial.write_all(b"GET / HT").await.unwrap();
    for (name, stream) in [
        ("silent", &mut silent),
        ("partial preface", &mut partial),
        ("partial HTTP/1 head", &mut h1_partial),
    ] {
        assert!(
            closed_within(stream, Duration::from_secs(5)).await,
            "{name}"
        );
    }
}
