//! The attackers of the HTTP/2 flood scenario ([`crate::h2_floods`]), raw-frame clients
//! (`tests/support/src/h2wire.rs`) that obey no limit, and what is read of the gateway process
//! (CPU time from `/proc/<pid>/stat`).
//!
//! Each attacker floods one connection at a time, as fast as its socket takes frames,
//! in batches of [`BATCH`] streams, until the gateway ends the connection (a GOAWAY or
//! a close), it has used [`MAX_STREAMS`] stream ids on it, or 2 s after its phase ended;
//! then it drops that connection and, while the phase lasts, opens the next one (at
//! most its plan's count).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedReadHalf;

use crate::h2wire::{
    code, frame, get, next, open, request, CANCEL, ENHANCE_YOUR_CALM, GOAWAY, HEADERS,
    REFUSED_STREAM, RST_STREAM,
};

/// Streams written per write.
pub const BATCH: u32 = 50;
/// Stream ids one connection may use before its attacker gives up on it: a connection
/// still open after this many is one the gateway let the flood go on.
pub const MAX_STREAMS: u32 = 20_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flood {
    /// HEADERS of `GET /v1/ping` then RST_STREAM(CANCEL), again and again.
    RapidReset,
    /// Keyed `POST /v1/payments` announcing a 64-byte body that never comes: streams
    /// held open, far more of them than `http2_max_concurrent_streams`.
    StreamCount,
}

#[derive(Default)]
pub struct FloodTally {
    pub connections: AtomicUsize,
    /// Streams written (HEADERS frames).
    pub streams: AtomicUsize,
    /// Connections ended by a GOAWAY with ENHANCE_YOUR_CALM.
    pub calmed: AtomicUsize,
    /// Connections ended by a GOAWAY with another code.
    pub other_goaway: AtomicUsize,
    /// Connections closed without a GOAWAY.
    pub closed: AtomicUsize,
    /// Connections still served when their attacker stopped ([`MAX_STREAMS`] used, or
    /// 2 s past the phase).
    pub survived: AtomicUsize,
    /// Streams the gateway refused (RST_STREAM with REFUSED_STREAM).
    pub refused: AtomicUsize,
    /// Streams the gateway answered (response HEADERS).
    pub answered: AtomicUsize,
    pub connect_failed: AtomicUsize,
}

impl FloodTally {
    pub fn get(n: &AtomicUsize) -> usize {
        n.load(Relaxed)
    }
}

/// The next `BATCH` streams from `first` (odd ids).
fn batch(kind: Flood, conn: usize, first: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for id in (first..first + 2 * BATCH).step_by(2) {
        match kind {
            Flood::RapidReset => {
                out.extend(get(id, true));
                out.extend(frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()));
            }
            Flood::StreamCount => {
                let key = format!("h2flood-{conn}-{id}");
                let fields = [
                    ("idempotency-key", key.as_str()),
                    ("authorization", "Bearer flood"),
                    ("content-type", "application/json"),
                    ("content-length", "64"),
                ];
                out.extend(request(id, "POST", "/v1/payments", &fields));
            }
        }
    }
    out
}

/// How the gateway ended a connection: Some(GOAWAY code), or None for a close.
async fn read_until_end(mut rd: OwnedReadHalf, tally: Arc<FloodTally>) -> Option<u32> {
    while let Some((kind, _, payload)) = next(&mut rd).await {
        match kind {
            GOAWAY => return code(kind, &payload),
            RST_STREAM if code(kind, &payload) == Some(REFUSED_STREAM) => {
                tally.refused.fetch_add(1, Relaxed);
            }
            HEADERS => {
                tally.answered.fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }
    None
}

/// Floods connections one after another until `until` or `max_connections`.
pub async fn flood(
    kind: Flood,
    target: SocketAddr,
    until: Instant,
    max_connections: usize,
    tally: Arc<FloodTally>,
) {
    while Instant::now() < until && FloodTally::get(&tally.connections) < max_connections {
        let conn = tally.connections.fetch_add(1, Relaxed);
        let connect = tokio::time::timeout(Duration::from_secs(1), open(target)).await;
        let Ok(stream) = connect else {
            tally.connect_failed.fetch_add(1, Relaxed);
            continue;
        };
        let (rd, mut wr) = stream.into_split();
        let reader = tokio::spawn(read_until_end(rd, tally.clone()));
        let mut id = 1;
        // A connection opened before `until` is flooded to its end, 2 s past it at most.
        let stop = until + Duration::from_secs(2);
        while !reader.is_finished() && Instant::now() < stop && id < 2 * MAX_STREAMS {
            let frames = batch(kind, conn, id);
            let wrote = tokio::time::timeout(Duration::from_secs(1), wr.write_all(&frames)).await;
            if !matches!(wrote, Ok(Ok(()))) {
                break;
            }
            tally.streams.fetch_add(BATCH as usize, Relaxed);
            id += 2 * BATCH;
            tokio::task::yield_now().await;
        }
        // The GOAWAY may still be on its way: a second at most.
        let ended = tokio::time::timeout(Duration::from_secs(1), reader).await;
        let counter = match ended {
            Ok(Ok(Some(ENHANCE_YOUR_CALM))) => &tally.calmed,
            Ok(Ok(Some(_))) => &tally.other_goaway,
            Ok(Ok(None)) => &tally.closed,
            _ => &tally.survived,
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// How long each idle reading of [`idle_cores`] lasts.
const IDLE_SECONDS: u64 = 2;

/// CPU cores a process used over [`IDLE_SECONDS`], with nothing sent to it.
pub async fn idle_cores(pid: u32) -> f64 {
    cores_over(pid, IDLE_SECONDS).await
}

/// CPU cores a process used over the next `seconds`.
pub async fn cores_over(pid: u32, seconds: u64) -> f64 {
    let cpu0 = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    (cpu_seconds(pid) - cpu0) / seconds as f64
}

/// user + system CPU time of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    static TICK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let tick = *TICK.get_or_init(|| {
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok();
        (out.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())).unwrap_or(100.0)
    });
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = (stat.rsplit_once(')').map(|(_, rest)| rest))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    (ticks(11).unwrap_or(0.0) + ticks(12).unwrap_or(0.0)) / tick
}
