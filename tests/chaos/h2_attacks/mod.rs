//! The HTTP/2 attack rows: each attack a hostile client made with raw h2c connections
//! (stalled readers, declared bodies, stream slots, resets after the claim, idle
//! connections; attackers: [`crate::h2_attacks::attackers`]), held for [`ATTACK`] against one
//! replica of the real fleet running the limits it was reported with
//! (`max_concurrent_requests = 128`, `buffer_budget = "32MiB"`, `write_timeout = "3s"`,
//! `http2_max_concurrent_streams = 100`; `idle_timeout = "3s"` for the idle row), while
//! two ordinary clients send keyed HTTP/1.1 POSTs (each tried once) to the same replica
//! (Redis command timeout 1 s, so that 1 MiB replays are served, not timed out).
//! The attacker's route (`/attack/`) goes to an upstream in this process that counts its
//! calls at once ([`crate::attack_upstream`]).
//!
//! Phases: 2 s idle, 2 s of ordinary traffic (the baseline), the attack, 2 s after, then,
//! once the ordinary clients are done, the buffered bytes and the limits read, and 2 s
//! idle. The replica's RSS is sampled every 100 ms, `idemgate_buffered_bytes` every
//! 250 ms, its CPU time read at each phase's edges. Its idle CPU is the one judged after
//! the attack (with traffic, its CPU follows the pace the shared machine lets the
//! ordinary clients keep); the idle reading starts about 4 s after the attack, so work
//! that stops sooner is not judged (the readings with traffic are in the notes).
//!
//! Verdict FAIL if: an ordinary request during the attack is not answered 2xx, or their
//! p99 exceeds [`NORMAL_P99_MS`]; the replica's RSS peak exceeds its baseline by more
//! than [`RSS_GROWTH_MIB`] ([`RSS_GROWTH_STALLED_MIB`] for the stalled readers); it
//! burns CPU once the attack is over (idle, more than [`IDLE_CORES`] over its idle use
//! before it); bytes stay charged 5 s after the attack; a key runs twice; or the attack's own bound is broken:
//! a stalled connection open past 2 x `write_timeout` + 3 s, or more than 2 x 8 MiB
//! charged for them; an idle one open past `idle_timeout` + 3 s; more than 2 x 32
//! stream-slot calls, or more than `max_concurrent_requests` reset calls, at the
//! upstream at once; 1 MiB or more charged for declared bodies. `CHAOS_H2_ATTACKS_UNLIMITED=1` runs the
//! same attacks with `connection_share = "100%"` and the timeouts and reset limit out of
//! reach, to show that the verdict can fail.

pub mod attackers;
mod verdict;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::abuse::parties::{buffered_after_attack, limited_summary, rss, sample_rss};
use crate::attack_upstream::AttackUpstream;
use crate::checker::Report;
use crate::cluster::{Durability, Options, Probe, Stack};
use crate::h2_attacks::attackers::{
    attacker, ordinary, Attack, AttackTally, Outcome, REPORT, REPORT_KEY,
};
use crate::h2_floods::flooders::{cpu_seconds, idle_cores};
use verdict::{verdict, Measured};

pub const ATTACK: Duration = Duration::from_secs(10);
/// Bound on the replica's RSS peak over its baseline: the buffer budget (32 MiB) plus
/// 24 MiB for the process; for the stalled readers, plus what their requests in flight
/// may hold while being answered (2 connections x 32 x the 1 MiB replay, fetched before
/// the budget can refuse it).
pub const RSS_GROWTH_MIB: u64 = 32 + 24;
pub const RSS_GROWTH_STALLED_MIB: u64 = RSS_GROWTH_MIB + 2 * 32;
pub const NORMAL_P99_MS: u64 = 2_000;
const NORMAL_WORKERS: usize = 2;

/// The replica's `[server]` limits, or (`unlimited`) the same with the new limits out of
/// reach. `max_request_body` + `max_response_body` (4 MiB) stay under a quarter of the
/// budget, so that a connection's share is that quarter (8 MiB), not the share's floor.
fn server_limits(unlimited: bool) -> String {
    let common = "max_concurrent_requests = 128\nbuffer_budget = \"32MiB\"\n\
                  http2_max_concurrent_streams = 100\nmax_request_body = \"2MiB\"\n\
                  max_response_body = \"2MiB\"\n\
                  body_read_timeout = \"30s\"\nhttp2_keep_alive_interval = \"1s\"\n";
    let new = if unlimited {
        "connection_share = \"100%\"\nwrite_timeout = \"1h\"\nidle_timeout = \"1h\"\n\
         http2_max_reset_streams = 1000000\n"
    } else {
        "write_timeout = \"3s\"\nidle_timeout = \"3s\"\n"
    };
    format!("{common}{new}")
}

/// One attack row: the replica under attack `kind` for [`ATTACK`] while the ordinary
/// clients send, measured and judged (the module's doc).
pub async fn attack(name: String, kind: Attack) -> Report {
    let unlimited = std::env::var_os("CHAOS_H2_ATTACKS_UNLIMITED").is_some();
    let upstream = AttackUpstream::start().await;
    let stack = start_stack(unlimited, &upstream).await;
    let target: SocketAddr = ([127, 0, 0, 1], stack.replicas[0].port).into();
    let pid = stack.replicas[0].pid().expect("the replica runs");
    // Past the start-up's last work before the idle reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_before = idle_cores(pid).await;
    if kind == Attack::StalledReaders {
        store_the_report(&stack, target).await;
    }

    let tally = Arc::new(AttackTally::default());
    let held = hold_the_attack(&stack, kind, target, pid, &tally).await;

    let buffered = buffered_after_attack(&stack, Duration::from_millis(200)).await;
    let limited = limited_summary(
        &stack,
        &[
            "connection_in_flight",
            "connection_budget",
            "max_in_flight",
            "buffer_budget",
            "stream_write_timeout",
            "idle_timeout",
            "http2_reset_streams",
        ],
    )
    .await;
    let idle_after = idle_cores(pid).await;

    let measured = Measured {
        unlimited,
        outcomes: held.outcomes,
        window: held.window,
        cores: held.cores,
        idle: (idle_before, idle_after),
        rss_kib: held.rss_kib,
        buffered: (held.buffered_peak, buffered),
        upstream_peak: upstream.peak(),
        limited,
    };
    let mut report = verdict(&stack, &name, kind, &tally, measured).await;
    stack.keep_logs_of(&mut report, &name);
    report
}

/// One replica with the attack's limits ([`server_limits`]), Redis only, and the
/// attacker's route to `upstream` with the replay cache off.
async fn start_stack(unlimited: bool, upstream: &AttackUpstream) -> Stack {
    let opts = Options {
        replicas: 1,
        durability: Durability::RedisOnly,
        lock_ttl: "10s".into(),
        // The stalled readers' replays are 1 MiB claims: at the default 300 ms most of
        // 64 at once time out in Redis (503 `store_unavailable`) before the budget is
        // reached, and the attack would not be the one reported.
        command_timeout: "1s".into(),
        server: server_limits(unlimited),
        extra: format!(
            "[[routes]]\nname = \"attack\"\npath_prefix = \"/attack/\"\nupstream = \"{}\"\n\
             upstream_timeout = \"5s\"\n[replay_cache]\nmax_bytes = \"0B\"\n",
            upstream.url()
        ),
        ..Options::default()
    };
    Stack::start(opts).await
}

/// Stores the report the stalled readers ask replays of, under [`REPORT_KEY`].
async fn store_the_report(stack: &Stack, target: SocketAddr) {
    let stored = (stack.http.post(format!("http://{target}{REPORT}")))
        .header("Idempotency-Key", REPORT_KEY)
        .header("Authorization", "Bearer attacker")
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(stored, Ok(200)),
        "the replayed report was not stored: {stored:?}"
    );
}

/// What the phases with traffic left: the ordinary clients' outcomes, the window that
/// counts, CPU cores before, during and after the attack, RSS before, at its peak and
/// after (KiB), and the peak of `idemgate_buffered_bytes` during the attack.
struct Held {
    outcomes: Vec<Outcome>,
    window: (Instant, Instant),
    cores: (f64, f64, f64),
    rss_kib: (u64, u64, u64),
    buffered_peak: u64,
}

/// The phases with traffic: 2 s of ordinary clients alone, the attack (`kind` on
/// `target`, tallied in `tally`) for [`ATTACK`], 2 s after; returns once the ordinary
/// clients are done.
async fn hold_the_attack(
    stack: &Stack,
    kind: Attack,
    target: SocketAddr,
    pid: u32,
    tally: &Arc<AttackTally>,
) -> Held {
    let start = Instant::now();
    let attack_at = start + Duration::from_secs(2);
    let attack_end = attack_at + ATTACK;
    let until = attack_end + Duration::from_secs(2);
    let normal = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..NORMAL_WORKERS)
        .map(|w| {
            let (base, key) = (format!("http://{target}"), format!("h2attack-normal-{w}"));
            tokio::spawn(ordinary(base, key, until, normal.clone()))
        })
        .collect();
    let peak = Arc::new(Mutex::new(0u64));
    let sampler = tokio::spawn(sample_rss(pid, until, peak.clone()));
    let cpu0 = cpu_seconds(pid);
    tokio::time::sleep_until(attack_at.into()).await;
    let (cpu1, baseline_rss) = (cpu_seconds(pid), rss(pid).map_or(0, |(now, _)| now));

    let attackers = futures_util::future::join_all(
        (0..kind.connections())
            .map(|slot| tokio::spawn(attacker(kind, target, slot, attack_end, tally.clone()))),
    );
    let (_, buffered_peak) = tokio::join!(attackers, peak_buffered(stack, attack_end));
    let cpu2 = cpu_seconds(pid);
    let attack_s = attack_at.elapsed().as_secs_f64();
    tokio::time::sleep_until(until.into()).await;
    let cpu3 = cpu_seconds(pid);
    for w in workers {
        let _ = w.await;
    }
    let _ = sampler.await;
    let after_rss = rss(pid).map_or(0, |(now, _)| now);
    let outcomes = std::mem::take(&mut *normal.lock().unwrap());
    let peak_rss = *peak.lock().unwrap();
    Held {
        outcomes,
        window: (attack_at, attack_end + Duration::from_secs(1)),
        cores: (
            (cpu1 - cpu0) / 2.0,
            (cpu2 - cpu1) / attack_s,
            (cpu3 - cpu2) / 2.0,
        ),
        rss_kib: (baseline_rss, peak_rss, after_rss),
        buffered_peak,
    }
}

/// The replica's `idemgate_buffered_bytes` read every 250 ms until `attack_end`: its
/// peak.
async fn peak_buffered(stack: &Stack, attack_end: Instant) -> u64 {
    let mut buffered_peak = 0u64;
    while Instant::now() < attack_end {
        let bytes = stack.replicas[0]
            .metric(&stack.http, "idemgate_buffered_bytes")
            .await;
        buffered_peak = buffered_peak.max(bytes.unwrap_or(0.0) as u64);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    buffered_peak
}
