//! The attackers of the HTTP/2 attack rows ([`crate::h2_attacks`]), raw h2c connections
//! ([`crate::h2wire::Held`]: they answer PINGs and acknowledge SETTINGS, and never open
//! a window), each attack as it was reported, and the ordinary client measured
//! meanwhile. Every attacker keeps its attack up until its phase ends, opening a new
//! connection whenever the gateway ends one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::h2wire::{data, frame, request, reset, Held, Seen, CANCEL, INITIAL_WINDOW_SIZE, PING};

/// The stored response the stalled readers replay (1 MiB, from the attack upstream).
pub const REPORT: &str = "/attack/report?bytes=1048576";
pub const REPORT_KEY: &str = "h2attack-report";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// 2 connections, each with a stream window of 0, ask for 40 replays of `REPORT`.
    StalledReaders,
    /// 1 connection, 100 keyed POSTs declaring a 1 MiB body, no byte of it sent.
    DeclaredBodies,
    /// 2 connections x 100 bodiless keyed POSTs to a 4 s upstream, again as they end.
    StreamSlots,
    /// One connection at a time: keyed POSTs to a 3 s upstream, each reset 5 ms after.
    ResetAfterClaim,
    /// 200 connections that only answer PINGs (one in five also sends its own).
    IdleConnections,
}

impl Attack {
    /// Connections the attack keeps open at once.
    pub fn connections(self) -> usize {
        match self {
            Attack::StalledReaders | Attack::StreamSlots => 2,
            Attack::DeclaredBodies | Attack::ResetAfterClaim => 1,
            Attack::IdleConnections => 200,
        }
    }
}

#[derive(Default)]
pub struct AttackTally {
    pub connections: AtomicUsize,
    pub connect_failed: AtomicUsize,
    /// Streams written (HEADERS frames).
    pub streams: AtomicUsize,
    /// Answers with a 2xx, with a 503, with another status.
    pub ok: AtomicUsize,
    pub refused: AtomicUsize,
    pub other: AtomicUsize,
    /// Connections the gateway sent a GOAWAY on; that it closed.
    pub goaway: AtomicUsize,
    pub closed: AtomicUsize,
    /// The longest a connection lasted before the gateway closed it, in ms; and how
    /// many were still open when their attacker stopped, with the oldest's age.
    pub longest_ms: AtomicU64,
    pub open_at_end: AtomicUsize,
    pub oldest_open_ms: AtomicU64,
    /// The first connections' stories, for the row's evidence.
    pub stories: Mutex<Vec<String>>,
}

impl AttackTally {
    pub fn n(counter: &AtomicUsize) -> usize {
        counter.load(Relaxed)
    }

    /// Counts what one connection saw, once it ended or its attacker stopped.
    fn count(&self, conn: &Held, since: Instant) {
        let seen = &conn.seen;
        let ms = |at: Instant| at.saturating_duration_since(since).as_millis();
        let mut stories = self.stories.lock().unwrap();
        if stories.len() < 12 {
            stories.push(format!(
                "connection opened at {} ms: GOAWAY {:?} (at ms, code; last stream {}), closed at \
                 {:?} ms, answers {:?}, {} PINGs answered, {} resets by the replica",
                ms(conn.opened),
                conn.goaway().map(|(at, code)| (ms(at), code)),
                seen.last_stream.load(Relaxed),
                conn.closed().map(ms),
                seen.statuses(),
                Seen::n(&seen.pings),
                Seen::n(&seen.resets),
            ));
        }
        drop(stories);
        let statuses = seen.statuses();
        let refused = statuses.get(&503).copied().unwrap_or(0);
        self.ok.fetch_add(Seen::n(&seen.ok), Relaxed);
        self.refused.fetch_add(refused, Relaxed);
        self.other
            .fetch_add(Seen::n(&seen.other) - refused, Relaxed);
        if conn.goaway().is_some() {
            self.goaway.fetch_add(1, Relaxed);
        }
        match conn.closed() {
            Some(at) => {
                self.closed.fetch_add(1, Relaxed);
                let lasted = (at - conn.opened).as_millis() as u64;
                self.longest_ms.fetch_max(lasted, Relaxed);
            }
            None => {
                self.open_at_end.fetch_add(1, Relaxed);
                let age = conn.opened.elapsed().as_millis() as u64;
                self.oldest_open_ms.fetch_max(age, Relaxed);
            }
        }
    }
}

/// A keyed POST's HEADERS as the attacker sends it (tenant `attacker`), its side open.
fn post(stream: u32, path: &str, key: &str, more: &[(&str, &str)]) -> Vec<u8> {
    let mut fields = vec![
        ("idempotency-key", key),
        ("authorization", "Bearer attacker"),
        ("content-type", "application/json"),
    ];
    fields.extend_from_slice(more);
    request(stream, "POST", path, &fields)
}

/// Whether `conn` is over: the gateway ended it, or the phase did.
fn over(conn: &Held, until: Instant) -> bool {
    conn.goaway().is_some() || conn.closed().is_some() || Instant::now() >= until
}

/// Waits until the gateway closes `conn` or `until`.
async fn hold(conn: &Held, until: Instant) {
    let _ = conn.closed_by(until).await;
}

/// One attacker slot: connection after connection until `until`.
pub async fn attacker(
    kind: Attack,
    target: SocketAddr,
    slot: usize,
    until: Instant,
    tally: Arc<AttackTally>,
) {
    let (mut round, since) = (0, Instant::now());
    while Instant::now() < until {
        round += 1;
        let settings: &[(u16, u32)] = match kind {
            Attack::StalledReaders => &[(INITIAL_WINDOW_SIZE, 0)],
            _ => &[],
        };
        let connect = tokio::time::timeout(Duration::from_secs(2), Held::open(target, settings));
        let Ok(conn) = connect.await else {
            tally.connect_failed.fetch_add(1, Relaxed);
            continue;
        };
        tally.connections.fetch_add(1, Relaxed);
        let tag = format!("h2attack-{slot}-{round}");
        let wrote = |n: usize| {
            tally.streams.fetch_add(n, Relaxed);
        };
        match kind {
            Attack::StalledReaders => stall_readers(&conn, until, &wrote).await,
            Attack::DeclaredBodies => declare_bodies(&conn, &tag, until, &wrote).await,
            Attack::StreamSlots => fill_stream_slots(&conn, &tag, until, &wrote).await,
            Attack::ResetAfterClaim => reset_after_claim(&conn, &tag, until, &wrote).await,
            Attack::IdleConnections => stay_idle(&conn, slot, until).await,
        }
        tally.count(&conn, since);
    }
}

/// [`Attack::StalledReaders`] on `conn`: 40 replays of [`REPORT`] asked for (counted
/// with `wrote`), then held until the gateway closes it or `until`.
async fn stall_readers(conn: &Held, until: Instant, wrote: &impl Fn(usize)) {
    let mut frames = Vec::new();
    for id in (1..80).step_by(2) {
        frames.extend(post(id, REPORT, REPORT_KEY, &[("content-length", "2")]));
        frames.extend(data(id, b"{}", true));
    }
    if conn.send(&frames).await.is_ok() {
        wrote(40);
    }
    hold(conn, until).await;
}

/// [`Attack::DeclaredBodies`] on `conn`: 100 keyed POSTs (keys from `tag`) declaring a
/// 1 MiB body and sending none of it, then held.
async fn declare_bodies(conn: &Held, tag: &str, until: Instant, wrote: &impl Fn(usize)) {
    let mut frames = Vec::new();
    for id in (1..200).step_by(2) {
        let key = format!("{tag}-{id}");
        frames.extend(post(
            id,
            "/attack/upload",
            &key,
            &[("content-length", "1048576")],
        ));
    }
    if conn.send(&frames).await.is_ok() {
        wrote(100);
    }
    hold(conn, until).await;
}

/// [`Attack::StreamSlots`] on `conn`: 100 slow calls at a time, again once all are
/// answered, until the connection or the phase is over.
async fn fill_stream_slots(conn: &Held, tag: &str, until: Instant, wrote: &impl Fn(usize)) {
    let mut id = 1;
    while !over(conn, until) {
        let mut frames = Vec::new();
        for _ in 0..100 {
            let key = format!("{tag}-{id}");
            let mut headers = post(id, "/attack/slow?ms=4000", &key, &[]);
            headers[4] |= 0x1; // END_STREAM: no body
            frames.extend(headers);
            id += 2;
        }
        if conn.send(&frames).await.is_err() {
            break;
        }
        wrote(100);
        // Again once all 100 are answered.
        let sent = (id / 2) as usize;
        while !over(conn, until) && Seen::n(&conn.seen.ok) + Seen::n(&conn.seen.other) < sent {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// [`Attack::ResetAfterClaim`] on `conn`: a keyed call reset 5 ms after it was sent,
/// one after another until the connection or the phase is over, then held.
async fn reset_after_claim(conn: &Held, tag: &str, until: Instant, wrote: &impl Fn(usize)) {
    let mut id = 1;
    while !over(conn, until) {
        let key = format!("{tag}-{id}");
        let mut frames = post(
            id,
            "/attack/charge?ms=3000",
            &key,
            &[("content-length", "2")],
        );
        frames.extend(data(id, b"{}", true));
        if conn.send(&frames).await.is_err() {
            break;
        }
        wrote(1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = conn.send(&reset(id, CANCEL)).await;
        id += 2;
    }
    // Its GOAWAY: then the gateway closes it.
    hold(conn, until).await;
}

/// [`Attack::IdleConnections`] on `conn`: nothing sent (a PING every 500 ms on every
/// fifth `slot`) until the connection or the phase is over, then held.
async fn stay_idle(conn: &Held, slot: usize, until: Instant) {
    let pings = slot % 5 == 0;
    while !over(conn, until) {
        if pings {
            let _ = conn.send(&frame(PING, 0, 0, &[1; 8])).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    hold(conn, until).await;
}

/// What became of one ordinary request: when it ended, its status (0: no answer) and
/// problem code (a non-2xx), and how long it took, in ms.
pub type Outcome = (Instant, u16, String, u64);

/// The ordinary client: small keyed HTTP/1.1 POSTs of tenant `normal` (a 20 ms upstream
/// call each), one after another, each tried once, until `until`.
pub async fn ordinary(base: String, prefix: String, until: Instant, out: Arc<Mutex<Vec<Outcome>>>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let started = Instant::now();
        let sent = http
            .post(format!("{base}/v1/payments?latency_ms=20"))
            .header("Idempotency-Key", format!("{prefix}-{n}"))
            .header("Authorization", "Bearer normal")
            .header("Content-Type", "application/json")
            .body(format!("{{\"amount\":{n}}}"))
            .send()
            .await;
        let (status, code) = match sent {
            Ok(r) if r.status().is_success() => {
                let status = r.status().as_u16();
                match r.bytes().await {
                    Ok(_) => (status, String::new()),
                    Err(_) => (0, "body error".into()),
                }
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                (status, body["code"].as_str().unwrap_or("").to_string())
            }
            Err(e) if e.is_timeout() => (0, "timeout".into()),
            Err(_) => (0, "connection error".into()),
        };
        let took = started.elapsed().as_millis() as u64;
        out.lock()
            .unwrap()
            .push((Instant::now(), status, code, took));
    }
}
