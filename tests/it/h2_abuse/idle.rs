//! `server.idle_timeout`: a connection that does nothing but keep itself alive (HTTP/2:
//! answer the gateway's PINGs, or send its own; HTTP/1.1: stay open between requests)
//! holds a `max_connections` slot; after `idle_timeout` with no open stream it is closed,
//! an HTTP/2 one with a GOAWAY first. PINGs are not activity; a stream that takes
//! longer than `idle_timeout` is.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Target;
use crate::support::h2wire::{frame, request, Held, Seen, PING};
use crate::support::raw::read_response;

const IDLE: Duration = Duration::from_secs(2);
/// Slack on every bound: timers, a busy machine.
const SLACK: Duration = Duration::from_secs(2);

/// Server keys of the idle tests: `idle_timeout` [`IDLE`], the gateway pinging every
/// 300 ms, and a header-read timeout out of the way.
const IDLE_SERVER: &str = "idle_timeout = \"2s\"\nhttp2_keep_alive_interval = \"300ms\"\n\
                           http2_keep_alive_timeout = \"5s\"\nheader_read_timeout = \"30s\"\n";

#[tokio::test]
async fn http2_connections_that_only_ping_are_closed_after_idle_timeout() {
    let target = Target::start("idle-h2", IDLE_SERVER).await;
    let idle0 = target.limited("idle_timeout").await;
    let start = Instant::now();
    // Answers the gateway's PINGs, nothing else.
    let answering = Held::open(target.addr, &[]).await;
    // Sends a PING of its own every 200 ms too.
    let pinging = Held::open(target.addr, &[]).await;
    // Has a stream open longer than `idle_timeout`: the upstream takes 3.5 s.
    let busy = Held::open(target.addr, &[]).await;
    let mut slow = request(1, "GET", "/attack/slow?ms=3500", &[]);
    slow[4] |= 0x1; // END_STREAM: no body
    busy.send(&slow).await.unwrap();

    let pinger = async {
        while pinging.closed().is_none() && start.elapsed() < IDLE + 3 * SLACK {
            let _ = pinging.send(&frame(PING, 0, 0, &[7; 8])).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    pinger.await;

    for (name, conn) in [("answering", &answering), ("pinging", &pinging)] {
        let (at, _) = (conn.goaway())
            .unwrap_or_else(|| panic!("{name}: no GOAWAY within {:?}", IDLE + 3 * SLACK));
        let after = at - conn.opened;
        assert!(
            after >= IDLE - Duration::from_millis(300),
            "{name}: GOAWAY after {after:?}, before idle_timeout ({IDLE:?})"
        );
        assert!(after <= IDLE + SLACK, "{name}: GOAWAY only after {after:?}");
        let closed = conn.closed_by(at + SLACK).await;
        assert!(
            closed.is_some(),
            "{name}: still open {SLACK:?} after its GOAWAY"
        );
        assert!(
            Seen::n(&conn.seen.pings) >= 2,
            "{name}: the gateway sent only {} PINGs: the test shows nothing about them",
            Seen::n(&conn.seen.pings)
        );
    }

    // The busy connection: its stream is answered, then it idles out in turn.
    let answered = async {
        while Seen::n(&busy.seen.ok) == 0 && busy.closed().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let _ = tokio::time::timeout_at((start + Duration::from_secs(10)).into(), answered).await;
    let answered_at = Instant::now();
    assert_eq!(
        Seen::n(&busy.seen.ok),
        1,
        "the stream open longer than idle_timeout was not answered (GOAWAY at {:?}, closed at {:?})",
        busy.goaway().map(|(t, _)| t - busy.opened),
        busy.closed().map(|t| t - busy.opened),
    );
    assert!(
        busy.goaway()
            .is_none_or(|(t, _)| t >= answered_at - Duration::from_millis(100)),
        "the busy connection got its GOAWAY while its stream was open"
    );
    let goaway = busy.goaway_by(answered_at + IDLE + SLACK).await;
    assert!(
        goaway.is_some(),
        "the busy connection, idle after its stream, got no GOAWAY"
    );
    assert!(busy
        .closed_by(answered_at + IDLE + 2 * SLACK)
        .await
        .is_some());
    assert!(target.limited("idle_timeout").await - idle0 >= 3.0);
}

#[tokio::test]
async fn http1_keep_alive_connections_are_closed_after_idle_timeout() {
    let target = Target::start("idle-h1", IDLE_SERVER).await;
    let idle0 = target.limited("idle_timeout").await;
    let mut conn = TcpStream::connect(target.addr).await.unwrap();
    let ask =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", target.addr).into_bytes();
    // A request that takes longer than idle_timeout is not cut.
    conn.write_all(&ask("/attack/slow?ms=2500")).await.unwrap();
    let slow = tokio::time::timeout(Duration::from_secs(10), read_response(&mut conn)).await;
    let (status, _) = slow
        .expect("answered")
        .expect("the slow request was answered");
    assert_eq!(status, 200);
    // Another on the same connection, then nothing.
    conn.write_all(&ask("/attack/quick")).await.unwrap();
    let (status, _) = read_response(&mut conn).await.unwrap();
    assert_eq!(status, 200);
    let idle_since = Instant::now();

    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(IDLE - Duration::from_millis(300), conn.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "closed (or sent {early:?}) before idle_timeout"
    );
    let closed =
        tokio::time::timeout(SLACK + Duration::from_millis(300), conn.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "keep-alive connection idle {:?} not closed: {closed:?}",
        idle_since.elapsed()
    );
    assert!(target.limited("idle_timeout").await - idle0 >= 1.0);
}

/// The admin listener's connections are in use while they carry requests: one that
/// asks `/healthz` every 500 ms for twice `idle_timeout` stays open, and is closed once
/// it idles for `idle_timeout`.
#[tokio::test]
async fn an_admin_connection_in_use_is_not_closed_as_idle() {
    let target = Target::start("idle-admin", IDLE_SERVER).await;
    let admin = target.replica.admin_url();
    let addr = admin.trim_start_matches("http://").to_string();
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let ask = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes();
    let start = Instant::now();
    let mut asked = 0;
    while start.elapsed() < IDLE * 2 {
        conn.write_all(&ask).await.unwrap();
        let answered = read_response(&mut conn).await;
        assert!(
            matches!(answered, Ok((200, _))),
            "request {asked} on an admin connection in use {:?}: {answered:?}",
            start.elapsed()
        );
        asked += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let idle_since = Instant::now();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(IDLE + SLACK, conn.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "admin connection idle {:?} not closed: {closed:?}",
        idle_since.elapsed()
    );
}
