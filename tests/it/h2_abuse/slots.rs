//! Streams that hold a request slot: keyed POSTs declaring a 1 MiB body and sending no
//! byte of it (held until `body_read_timeout`), and bodiless keyed POSTs to a slow
//! upstream, more of them than `max_concurrent_requests`. A connection holds at most its
//! share of `max_concurrent_requests` (32 of 128), the streams beyond it get 503
//! `overloaded`, and a declared body that never comes holds no budget, so the ordinary
//! client is served.

use std::time::{Duration, Instant};

use super::{attacker_post, Target, MIB, SHARE};
use crate::support::h2wire::{Held, Seen};

/// How long the tests hold their attack while the ordinary client runs.
const HOLD: Duration = Duration::from_secs(3);

#[tokio::test]
async fn declared_bodies_never_sent_hold_no_budget_and_at_most_a_share_of_slots() {
    let target = Target::start(
        "declared",
        "max_request_body = \"2MiB\"\nbody_read_timeout = \"30s\"\n",
    )
    .await;
    let refused0 = target.limited("connection_in_flight").await;
    let ordinary = target.ordinary("declared-normal");
    let attack = Instant::now();
    let conn = Held::open(target.addr, &[]).await;
    let mut frames = Vec::new();
    for i in 0..100u32 {
        let key = format!("declared-{i}");
        let declared = [("content-length", "1048576")];
        frames.extend(attacker_post(2 * i + 1, "/attack/upload", &key, &declared));
    }
    conn.send(&frames).await.unwrap();

    let peak = target
        .buffered_peak(attack + Duration::from_millis(800), attack + HOLD)
        .await;
    assert!(
        peak < MIB,
        "100 declared, unsent 1 MiB bodies are charged to the budget ({peak} bytes)"
    );
    let answers = ordinary.stop().await;
    answers.assert_served(attack, attack + HOLD, 10, "declared bodies");
    assert!(conn.closed().is_none(), "the gateway closed the connection");
    assert_eq!(Seen::n(&conn.seen.ok), 0);
    assert!(
        Seen::n(&conn.seen.other) >= 100 - SHARE,
        "{} of 100 held streams refused: a connection held more than its share ({SHARE}) of \
         slots (answers: {:?})",
        Seen::n(&conn.seen.other),
        conn.seen.statuses()
    );
    assert!(target.limited("connection_in_flight").await - refused0 >= (100 - SHARE) as f64);
    assert_eq!(
        target.attack.started(),
        0,
        "a request without its body reached the upstream"
    );
}

#[tokio::test]
async fn bodiless_streams_beyond_max_concurrent_requests_hold_at_most_a_share_per_connection() {
    let target = Target::start("slots", "").await;
    let refused0 = target.limited("connection_in_flight").await;
    let ordinary = target.ordinary("slots-normal");
    let attack = Instant::now();
    let mut held = Vec::new();
    for c in 0..2 {
        let conn = Held::open(target.addr, &[]).await;
        let mut frames = Vec::new();
        for i in 0..100u32 {
            let key = format!("slots-{c}-{i}");
            let mut headers = attacker_post(2 * i + 1, "/attack/slow?ms=5000", &key, &[]);
            headers[4] |= 0x1; // END_STREAM: no body
            frames.extend(headers);
        }
        conn.send(&frames).await.unwrap();
        held.push(conn);
    }
    tokio::time::sleep_until((attack + HOLD).into()).await;
    let answers = ordinary.stop().await;
    // The calls admitted are all still at the upstream (5 s).
    let (peak, now) = (target.attack.peak(), target.attack.now());
    answers.assert_served(attack, attack + HOLD, 10, "stream slots");
    assert!(
        peak <= 2 * SHARE,
        "two connections had {peak} calls at the upstream at once, more than their shares (2 x {SHARE})"
    );
    assert!(
        now >= SHARE,
        "only {now} calls held: the attack held nothing"
    );
    for (c, conn) in held.iter().enumerate() {
        assert!(
            Seen::n(&conn.seen.other) >= 100 - SHARE,
            "connection {c}: {} of its 100 streams refused, it held more than its share \
             (answers: {:?})",
            Seen::n(&conn.seen.other),
            conn.seen.statuses()
        );
    }
    assert!(target.limited("connection_in_flight").await - refused0 >= 2.0 * (100 - SHARE) as f64);
}
