//! Stalled readers: two connections announce a stream window of 0 (no response byte
//! may be sent to them), answer every PING, and ask for 40 replays each of a stored
//! 1 MiB response. Each connection may hold at most its share of `buffer_budget`
//! (8 MiB), so the ordinary client is served; the send watchdog gives back what a
//! stream could not send once it has waited `write_timeout`, and GOAWAYs, then closes,
//! the connection.

use std::time::{Duration, Instant};

use super::{attacker_post, Target, BUDGET_SHARE, MIB, WRITE_TIMEOUT};
use crate::support::h2wire::{data, Held, Seen, INITIAL_WINDOW_SIZE};
use crate::support::keyed_post;

const REPLAYS_PER_CONNECTION: u32 = 40;
const PATH: &str = "/attack/report?bytes=1048576";

#[tokio::test]
async fn stalled_readers_hold_at_most_their_share_and_are_cut_off_by_the_send_watchdog() {
    // `max_response_body` 2 MiB, so that the share is 25% of the budget, not its floor
    // (`max_request_body` + `max_response_body`).
    let target = Target::start(
        "stalled",
        "http2_keep_alive_interval = \"500ms\"\nhttp2_keep_alive_timeout = \"5s\"\n\
         max_response_body = \"2MiB\"\n",
    )
    .await;
    store_the_report(&target).await;
    let (cut0, charged0) = (
        target.limited("stream_write_timeout").await,
        target.limited("connection_budget").await,
    );

    let ordinary = target.ordinary("stalled-normal");
    let attack = Instant::now();
    let held = stall_two_connections(&target).await;
    charged_at_most_their_shares(&target, attack).await;
    each_is_cut_off_by_the_watchdog(&held, attack).await;
    let first_goaway = (held.iter().filter_map(|c| c.goaway().map(|(at, _)| at)))
        .min()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answers = ordinary.stop().await;
    answers.assert_served(attack, first_goaway, 5, "stalled readers");

    assert!(
        target.limited("stream_write_timeout").await - cut0 >= 1.0,
        "no stream_write_timeout counted"
    );
    assert!(
        target.limited("connection_budget").await - charged0 >= 1.0,
        "80 replays of 1 MiB on two connections, and none over a connection's budget share \
         (answers: {:?}, {:?})",
        held[0].seen.statuses(),
        held[1].seen.statuses()
    );
    let left = target.buffered_drained(Duration::from_secs(3)).await;
    assert_eq!(
        left, 0,
        "bytes still charged after the stalled connections ended"
    );
}

/// Stores the 1 MiB response the stalled readers ask replays of.
async fn store_the_report(target: &Target) {
    let url = format!("http://{}{PATH}", target.addr);
    let stored = keyed_post(&target.http, url, "stored-report", "{}")
        .header("Authorization", "Bearer attacker")
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), 200);
    assert_eq!(stored.bytes().await.unwrap().len(), MIB as usize);
}

/// Two connections with a stream window of 0, each asking for
/// [`REPLAYS_PER_CONNECTION`] replays of the stored response.
async fn stall_two_connections(target: &Target) -> Vec<Held> {
    let mut held = Vec::new();
    for _ in 0..2 {
        let conn = Held::open(target.addr, &[(INITIAL_WINDOW_SIZE, 0)]).await;
        let mut frames = Vec::new();
        for i in 0..REPLAYS_PER_CONNECTION {
            let id = 2 * i + 1;
            let length = [("content-length", "2")];
            frames.extend(attacker_post(id, PATH, "stored-report", &length));
            frames.extend(data(id, b"{}", true));
        }
        conn.send(&frames).await.unwrap();
        held.push(conn);
    }
    held
}

/// While the attack (started at `attack`) is held, before the first stream's write
/// timeout, what the gateway has charged is at most the two connections' shares.
async fn charged_at_most_their_shares(target: &Target, attack: Instant) {
    let peak =
        (target.buffered_peak(attack + Duration::from_millis(800), attack + WRITE_TIMEOUT)).await;
    assert!(
        peak >= MIB,
        "the stalled replays were not charged to the budget ({peak} bytes): the attack held nothing"
    );
    assert!(
        peak <= 2 * BUDGET_SHARE + MIB,
        "two stalled connections held {peak} bytes of the budget, more than their shares (2 x {BUDGET_SHARE})"
    );
}

/// The send watchdog: a GOAWAY, then the end, for each stalled connection of `held`;
/// each was pinged and got no response byte.
async fn each_is_cut_off_by_the_watchdog(held: &[Held], attack: Instant) {
    for (c, conn) in held.iter().enumerate() {
        let goaway = conn
            .goaway_by(attack + 2 * WRITE_TIMEOUT + Duration::from_secs(3))
            .await;
        let (at, _) = goaway.unwrap_or_else(|| {
            panic!(
                "stalled connection {c} got no GOAWAY within {:?} (closed: {:?}, answers {:?}, \
                 resets {}, pings answered {})",
                2 * WRITE_TIMEOUT + Duration::from_secs(3),
                conn.closed().map(|t| t - attack),
                conn.seen.statuses(),
                Seen::n(&conn.seen.resets),
                Seen::n(&conn.seen.pings),
            )
        });
        let closed = conn
            .closed_by(at + WRITE_TIMEOUT + Duration::from_secs(2))
            .await;
        assert!(
            closed.is_some(),
            "stalled connection {c} still open {:?} after its GOAWAY",
            WRITE_TIMEOUT + Duration::from_secs(2)
        );
        assert!(
            Seen::n(&conn.seen.pings) >= 1,
            "connection {c} was never pinged: the test shows nothing about PINGs"
        );
        assert_eq!(
            Seen::n(&conn.seen.data),
            0,
            "a window of 0 let response bytes through"
        );
    }
}

#[tokio::test]
async fn a_stalled_reader_of_answers_that_are_not_buffered_is_cut_off_too() {
    // Answers the gateway does not buffer: pass-through GETs (streamed from the
    // upstream) and refusals (413: a declared body over `max_request_body`). With a
    // window of 0 none of their body can be sent; PINGs are answered, so the socket moves.
    let target = Target::start(
        "stalled-plain",
        "http2_keep_alive_interval = \"500ms\"\nhttp2_keep_alive_timeout = \"5s\"\n",
    )
    .await;
    let attack = Instant::now();
    let conn = Held::open(target.addr, &[(INITIAL_WINDOW_SIZE, 0)]).await;
    let mut frames = Vec::new();
    for i in 0..10u32 {
        let id = 2 * i + 1;
        if i % 2 == 0 {
            let mut get = crate::support::h2wire::request(id, "GET", "/attack/page", &[]);
            get[4] |= 0x1; // END_STREAM: no body
            frames.extend(get);
        } else {
            let too_large = [("content-length", "9999999")];
            frames.extend(attacker_post(id, "/attack/upload", "too-large", &too_large));
        }
    }
    conn.send(&frames).await.unwrap();
    let goaway = conn
        .goaway_by(attack + 2 * WRITE_TIMEOUT + Duration::from_secs(3))
        .await;
    let (at, _) = goaway.unwrap_or_else(|| {
        panic!(
            "a connection whose answers ({:?}) could send no byte for {:?} got no GOAWAY \
             (PINGs answered: {}; closed: {:?})",
            conn.seen.statuses(),
            2 * WRITE_TIMEOUT + Duration::from_secs(3),
            Seen::n(&conn.seen.pings),
            conn.closed().map(|t| t - attack),
        )
    });
    let closed = conn
        .closed_by(at + WRITE_TIMEOUT + Duration::from_secs(2))
        .await;
    assert!(
        closed.is_some(),
        "still open {WRITE_TIMEOUT:?} + 2 s after its GOAWAY"
    );
    assert_eq!(
        conn.seen.statuses().values().sum::<usize>(),
        10,
        "every stream was answered"
    );
}
