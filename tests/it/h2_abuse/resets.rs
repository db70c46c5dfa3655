//! Resets after the claim: keyed POSTs to a slow upstream, each reset (RST_STREAM
//! CANCEL) 5 ms after it was sent, or once its call is at the upstream. The gateway goes on with each call it started (the key is
//! claimed), and such a detached call keeps its slot of `max_concurrent_requests` and of
//! its connection's share until the upstream answers; the resets count toward
//! `server.http2_max_reset_streams` (200 per connection per minute), past which the
//! connection gets GOAWAY and is closed once its healthy streams are answered.

use std::time::{Duration, Instant};

use super::{attacker_post, Target, SHARE, WRITE_TIMEOUT};
use crate::support::h2wire::{data, request, reset, Held, Seen, CANCEL};
use crate::support::{eventually, keyed_post, problem_code, read};

/// hyper's guard against resets of streams not yet taken (rapid reset) out of the way:
/// on a busy machine the gateway may read a stream and its reset 5 ms later at once,
/// and the tests are about the resets of streams it took.
const PENDING: &str = "http2_max_pending_accept_reset_streams = 1000\n";

/// When each stream is reset.
#[derive(Clone, Copy)]
enum ResetWhen {
    /// 5 ms after it was sent (the attack as seen: most are claimed by then).
    After5ms,
    /// Once its call has reached the upstream (`/attack/` took one more call), or it
    /// was answered (refused): after its claim, for certain.
    Claimed,
}

/// Sends `count` keyed POSTs to `path` over `conns` in turn, each reset as `when` says;
/// stops writing on a connection the gateway has ended. The streams written per
/// connection.
async fn post_and_reset(
    target: &Target,
    conns: &[Held],
    count: u32,
    path: &str,
    when: ResetWhen,
) -> Vec<u32> {
    let mut written = vec![0u32; conns.len()];
    for n in 0..count {
        let c = n as usize % conns.len();
        let conn = &conns[c];
        if conn.goaway().is_some() || conn.closed().is_some() {
            continue;
        }
        let id = 2 * written[c] + 1;
        let key = format!("reset-{}-{c}-{id}", target.replica.port);
        let mut frames = attacker_post(id, path, &key, &[("content-length", "2")]);
        frames.extend(data(id, b"{}", true));
        let (calls, answers) = (target.attack.started(), answered(conn));
        if conn.send(&frames).await.is_err() {
            continue;
        }
        written[c] += 1;
        match when {
            ResetWhen::After5ms => tokio::time::sleep(Duration::from_millis(5)).await,
            ResetWhen::Claimed => {
                let deadline = Instant::now() + Duration::from_secs(2);
                while target.attack.started() == calls
                    && answered(conn) == answers
                    && Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        let _ = conn.send(&reset(id, CANCEL)).await;
    }
    written
}

/// The streams of `conn` answered (or reset) by the gateway so far.
fn answered(conn: &Held) -> usize {
    Seen::n(&conn.seen.ok) + Seen::n(&conn.seen.other) + Seen::n(&conn.seen.resets)
}

/// One connection's reset calls were at the upstream at most its share at once, and
/// at least `min` (the attack was held).
fn assert_within_share(target: &Target, min: usize) {
    let peak = target.attack.peak();
    assert!(
        peak <= SHARE,
        "one connection's reset calls reached the upstream {peak} at once, more than its \
         share ({SHARE})"
    );
    assert!(
        peak >= min,
        "only {peak} calls at once: the attack claimed little"
    );
}

#[tokio::test]
async fn resets_after_the_claim_on_one_connection_hold_at_most_its_share() {
    // The attack as reported: 400 keyed POSTs to a 3 s upstream, each reset 5 ms after
    // it was sent, on one connection.
    let target = Target::start("resets-one", PENDING).await;
    let ordinary = target.ordinary("resets-normal");
    let attack = Instant::now();
    let conn = Held::open(target.addr, &[]).await;
    let path = "/attack/charge?ms=3000";
    let conns = std::slice::from_ref(&conn);
    post_and_reset(&target, conns, 400, path, ResetWhen::After5ms).await;
    // Most streams beyond the share are refused at once, but their 503 is often not
    // sent: the reset comes first. One reset before its refusal was even polled counts
    // toward `http2_max_reset_streams`: on a busy machine the connection may get its
    // GOAWAY before the 400th stream, which is fine here. The detached calls end 3 s
    // after they started.
    let held_until = Instant::now();
    let answers = ordinary.stop().await;
    answers.assert_served(
        attack,
        held_until,
        10,
        "resets after the claim, one connection",
    );
    assert_within_share(&target, SHARE / 2);
}

#[tokio::test]
async fn streams_reset_past_http2_max_reset_streams_get_goaway_then_close() {
    // The same on a 200 ms upstream: the connection's share frees quickly, so most
    // streams are admitted before their reset, and more than 200 are abandoned.
    let target = Target::start("resets-limit", PENDING).await;
    let limited0 = target.limited("http2_reset_streams").await;
    let ordinary = target.ordinary("resets-limit-normal");
    let attack = Instant::now();
    let conn = Held::open(target.addr, &[]).await;
    let path = "/attack/charge?ms=200";
    let conns = std::slice::from_ref(&conn);
    // Until the GOAWAY: on a busy machine some resets come before the gateway took
    // their stream, and do not count.
    let written = post_and_reset(&target, conns, 1000, path, ResetWhen::After5ms).await;
    let sent = Instant::now();

    let goaway = conn.goaway_by(sent + Duration::from_secs(5)).await;
    let (at, _) = goaway.unwrap_or_else(|| {
        panic!(
            "no GOAWAY after {} streams reset 5 ms after they were sent (closed: {:?}, \
             answers {:?}, {} calls reached the upstream)",
            written[0],
            conn.closed().map(|t| t - attack),
            conn.seen.statuses(),
            target.attack.started(),
        )
    });
    let processed = (conn
        .seen
        .last_stream
        .load(std::sync::atomic::Ordering::Relaxed))
    .div_ceil(2);
    assert!(
        processed >= 200,
        "GOAWAY after {processed} streams: fewer than http2_max_reset_streams (200)"
    );
    let closed = conn.closed_by(at + Duration::from_secs(5)).await;
    assert!(
        closed.is_some(),
        "the connection is still open 5 s after its GOAWAY"
    );
    let answers = ordinary.stop().await;
    answers.assert_served(attack, at, 5, "resets past the limit");
    assert_within_share(&target, 1);
    assert!(target.limited("http2_reset_streams").await - limited0 >= 1.0);
}

#[tokio::test]
async fn detached_calls_keep_their_slot_until_the_upstream_answers() {
    let target = Target::start("resets-many", "").await;
    // Five connections, 40 streams each: under the reset limit, and five shares (160)
    // are more than `max_concurrent_requests` (128), which must bound the upstream calls.
    // Each stream is reset once its call is at the upstream, which takes 6 s.
    let mut conns = Vec::new();
    for _ in 0..5 {
        conns.push(Held::open(target.addr, &[]).await);
    }
    let attack = Instant::now();
    let path = "/attack/charge?ms=6000";
    let written = post_and_reset(&target, &conns, 200, path, ResetWhen::Claimed).await;
    let sent = attack.elapsed();
    assert!(
        written.iter().all(|&w| w == 40),
        "streams written: {written:?}"
    );
    let refused: Vec<_> = conns.iter().map(|c| c.seen.statuses()).collect();

    // The clients are gone, their calls go on: the slots stay taken.
    let url = format!("http://{}/v1/payments", target.addr);
    let request = keyed_post(&target.http, url, "while-detached", "{}");
    let request = request.header("Authorization", "Bearer normal");
    let (status, headers, body) = read(request.send().await.unwrap()).await;
    let (asked, now, peak) = (attack.elapsed(), target.attack.now(), target.attack.peak());
    assert!(
        asked < Duration::from_millis(5500),
        "too slow to observe the detached calls: asked after {asked:?}"
    );
    assert_eq!(
        status, 503,
        "with the slots taken by calls whose clients reset them, another client was \
         answered {status} ({now} calls at the upstream, peak {peak}; 200 streams sent in \
         {sent:?}; answers per connection {refused:?})"
    );
    assert_eq!(problem_code(&headers, &body), "overloaded");
    assert!(
        peak <= 128,
        "the upstream had {peak} calls at once, more than max_concurrent_requests (128)"
    );
    assert!(
        now > 3 * SHARE,
        "only {now} detached calls at the upstream from five connections: the attack did not \
         fill max_concurrent_requests (answers per connection {refused:?})"
    );

    // Once the upstream has answered, the slots are free again.
    let drained = eventually(Duration::from_secs(10), async || target.attack.now() == 0).await;
    assert!(
        drained,
        "{} calls still at the upstream",
        target.attack.now()
    );
    let url = format!("http://{}/v1/payments", target.addr);
    let after = keyed_post(&target.http, url, "after-detached", "{}")
        .header("Authorization", "Bearer normal")
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 201);
}

/// Past the reset limit the connection gets GOAWAY, but its healthy streams are not cut:
/// a request still running twice `write_timeout` after the GOAWAY is answered, then the
/// connection closes.
#[tokio::test]
async fn a_connection_past_the_reset_limit_still_answers_its_healthy_streams() {
    let server = format!("{PENDING}http2_max_reset_streams = 10\n");
    let target = Target::start("resets-healthy", &server).await;
    let conn = Held::open(target.addr, &[]).await;
    // Healthy: a GET answered after 8 s.
    let mut slow = request(1, "GET", "/attack/slow?ms=8000", &[]);
    slow[4] |= 0x1; // END_STREAM: no body
    conn.send(&slow).await.unwrap();
    // Then keyed POSTs, each reset 5 ms after it was sent, until the GOAWAY.
    for n in 1..=200u32 {
        if conn.goaway().is_some() || conn.closed().is_some() {
            break;
        }
        let id = 2 * n + 1;
        let key = format!("healthy-{id}");
        let path = "/attack/charge?ms=200";
        let mut frames = attacker_post(id, path, &key, &[("content-length", "2")]);
        frames.extend(data(id, b"{}", true));
        if conn.send(&frames).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = conn.send(&reset(id, CANCEL)).await;
    }
    let (at, _) = (conn
        .goaway_by(Instant::now() + Duration::from_secs(5))
        .await)
        .expect("a GOAWAY past http2_max_reset_streams");
    let answered = eventually(Duration::from_secs(12), async || {
        Seen::n(&conn.seen.ok) >= 1 || conn.closed().is_some()
    })
    .await;
    assert!(
        answered && Seen::n(&conn.seen.ok) == 1,
        "the healthy stream was cut: closed {:?} after the GOAWAY, answers {:?}",
        conn.closed().map(|c| c - at),
        conn.seen.statuses()
    );
    assert!(
        conn.closed().is_none_or(|c| c - at > WRITE_TIMEOUT),
        "closed before the healthy stream's answer"
    );
    let closed = conn.closed_by(Instant::now() + WRITE_TIMEOUT * 2).await;
    assert!(
        closed.is_some(),
        "still open after its last stream was answered"
    );
}
