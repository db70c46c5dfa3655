//! The HTTP/2 flood scenario: a rapid-reset flood, then a stream-count flood, each on
//! one connection at a time (reopened when the gateway ends it), against one replica of
//! the real fleet (an `idemgate serve` process) running the default `server.http2_*`
//! limits, while ordinary clients send keyed HTTP/1.1 POSTs to the same replica.
//!
//! Phases: 2 s idle, 2 s of ordinary traffic only (the baseline), the rapid-reset flood,
//! 1 s apart, the stream-count flood (attackers: [`crate::h2_floods::flooders`]), 2 s of ordinary
//! traffic only (after), the ordinary clients' last seconds (their margin for a flood
//! that overruns its phase), then 2 s idle. The replica's RSS (`/proc/<pid>/status`) is
//! sampled every 100 ms and its CPU time (`/proc/<pid>/stat`) read at each phase's edges.
//! Its idle CPU is the one judged after the floods: with traffic, its CPU follows the
//! pace the shared machine lets the ordinary clients keep, which moved it by 0.1 core
//! between two windows of one run. The idle reading starts several seconds after the
//! floods, so work that stops sooner is not judged (the readings with traffic are in the
//! notes).
//!
//! Verdict FAIL if: an attacking connection is still served when its attacker stops
//! (no GOAWAY, no close), the replica's RSS peak exceeds the baseline by more than
//! [`RSS_GROWTH_MIB`], a flood costs the replica more than [`CPU_PER_CONNECTION_MS`] of
//! CPU per flood connection or the replica still burns CPU once the floods are over
//! (idle, more than [`IDLE_CORES`] above its idle use before them), an ordinary request
//! fails or its p99 exceeds [`NORMAL_P99_MS`], a key runs twice, or a flood stream (its
//! body never sent) reaches the upstream. `CHAOS_H2_UNLIMITED=1` runs the same floods with the reset
//! limits set out of reach, to show that the verdict can fail.

pub mod flooders;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::abuse::parties::{failures, normal_client, rss, sample_rss, Outcome};
use crate::checker::Report;
use crate::cluster::{Durability, Options, Stack};
use crate::h2_floods::flooders::{cores_over, cpu_seconds, flood, idle_cores, Flood, FloodTally};

/// How hard: seconds per flood, attackers at once, connections per attacker at most.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub seconds: u64,
    pub attackers: usize,
    pub max_connections: usize,
}

/// `cargo test`: one attacker, 3 s per flood.
pub const FAST: Plan = Plan {
    seconds: 3,
    attackers: 1,
    max_connections: 20_000,
};

/// `make chaos`: four attackers at once, 10 s per flood.
pub const HEAVY: Plan = Plan {
    seconds: 10,
    attackers: 4,
    max_connections: 100_000,
};

/// Bound on the replica's RSS peak over its baseline.
pub const RSS_GROWTH_MIB: u64 = 24;
/// Bound on the replica's CPU per flood connection, in ms: what the limits let one
/// connection cost before its GOAWAY (20 reset streams, or 100 held streams and 1024
/// refused ones), with room for a debug build on a busy machine.
pub const CPU_PER_CONNECTION_MS: f64 = 100.0;
/// Bound on the replica's CPU use once the floods and the ordinary clients are done, in
/// cores over its idle use before them.
pub const IDLE_CORES: f64 = 0.05;
/// Bound on the ordinary requests' p99 (each a 20 ms upstream call), in ms: the
/// attackers run in the test process and share the machine's cores with the replica.
pub const NORMAL_P99_MS: u64 = 2_000;
const NORMAL_WORKERS: usize = 2;

/// The HTTP/2 limits the replica runs with: the defaults, written out, or (`unlimited`)
/// reset limits no flood here reaches.
fn server_limits(unlimited: bool) -> String {
    let resets = if unlimited { 1_000_000 } else { 20 };
    let errors = if unlimited { 1_000_000 } else { 1_024 };
    format!(
        "http2_max_concurrent_streams = 100\nhttp2_max_pending_accept_reset_streams = {resets}\n\
         http2_max_local_error_reset_streams = {errors}\n"
    )
}

/// What one flood phase did to the replica.
struct Phase {
    kind: Flood,
    tally: Arc<FloodTally>,
    cpu_s: f64,
    wall_s: f64,
}

impl Phase {
    fn per_stream_us(&self) -> f64 {
        self.cpu_s * 1e6 / FloodTally::get(&self.tally.streams).max(1) as f64
    }

    fn per_connection_ms(&self) -> f64 {
        self.cpu_s * 1e3 / FloodTally::get(&self.tally.connections).max(1) as f64
    }

    fn note(&self) -> String {
        let t = &self.tally;
        let n = FloodTally::get;
        format!(
            "{:?}: {} connections, {} streams written (read by the gateway up to its GOAWAY), \
             ended by GOAWAY(ENHANCE_YOUR_CALM) {}, other GOAWAY {}, closed {}, still served {}; \
             {} refused, {} answered; replica CPU {:.2} s in {:.1} s ({:.2} cores), {:.2} ms per \
             connection, {:.1} µs per stream written",
            self.kind,
            n(&t.connections),
            n(&t.streams),
            n(&t.calmed),
            n(&t.other_goaway),
            n(&t.closed),
            n(&t.survived),
            n(&t.refused),
            n(&t.answered),
            self.cpu_s,
            self.wall_s,
            self.cpu_s / self.wall_s,
            self.per_connection_ms(),
            self.per_stream_us(),
        )
    }
}

/// Runs `plan.attackers` attackers of one kind for `plan.seconds`.
async fn phase(kind: Flood, plan: Plan, target: SocketAddr, pid: u32) -> Phase {
    let tally = Arc::new(FloodTally::default());
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    let until = t0 + Duration::from_secs(plan.seconds);
    let attackers: Vec<_> = (0..plan.attackers)
        .map(|_| {
            tokio::spawn(flood(
                kind,
                target,
                until,
                plan.max_connections,
                tally.clone(),
            ))
        })
        .collect();
    for a in attackers {
        let _ = a.await;
    }
    Phase {
        kind,
        tally,
        cpu_s: cpu_seconds(pid) - cpu0,
        wall_s: t0.elapsed().as_secs_f64(),
    }
}

/// p50 and p99 of the successful ordinary requests, in ms.
fn percentiles(outcomes: &[Outcome]) -> (u64, u64) {
    let mut ok: Vec<u64> = outcomes.iter().filter_map(|o| o.clone().ok()).collect();
    ok.sort_unstable();
    let at = |p: f64| ok.get(((ok.len() as f64 * p) as usize).min(ok.len().max(1) - 1));
    (
        at(0.5).copied().unwrap_or(0),
        at(0.99).copied().unwrap_or(0),
    )
}

pub async fn floods(name: String, plan: Plan) -> Report {
    let unlimited = std::env::var_os("CHAOS_H2_UNLIMITED").is_some();
    let opts = Options {
        replicas: 1,
        durability: Durability::RedisOnly,
        server: server_limits(unlimited),
        ..Options::default()
    };
    let stack = Stack::start(opts).await;
    let target: SocketAddr = ([127, 0, 0, 1], stack.replicas[0].port).into();
    let pid = stack.replicas[0].pid().expect("the replica runs");
    // Past the start-up's last work before the idle reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_before = idle_cores(pid).await;

    // Ordinary clients throughout: the whole schedule, plus a margin for the floods'
    // last connections to end.
    let total = Duration::from_secs(2 + plan.seconds + 1 + plan.seconds + 2 + 8);
    let until = Instant::now() + total;
    let peak = Arc::new(Mutex::new(0u64));
    let sampler = tokio::spawn(sample_rss(pid, until, peak.clone()));
    let normal = Arc::new(Mutex::new(Vec::new()));
    let prefix = "h2floods-normal";
    let workers: Vec<_> = (0..NORMAL_WORKERS)
        .map(|w| {
            let (base, key) = (format!("http://{target}"), format!("{prefix}-{w}"));
            tokio::spawn(normal_client(base, key, until, normal.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline_cores = cores_over(pid, 2).await;
    let baseline_rss = rss(pid).map_or(0, |(now, _)| now);
    let rapid = phase(Flood::RapidReset, plan, target, pid).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count = phase(Flood::StreamCount, plan, target, pid).await;
    let after_cores = cores_over(pid, 2).await;
    let after_rss = rss(pid).map_or(0, |(now, _)| now);
    for w in workers {
        let _ = w.await;
    }
    let _ = sampler.await;
    let idle_after = idle_cores(pid).await;
    let measured = Measured {
        unlimited,
        cores: (baseline_cores, after_cores),
        idle: (idle_before, idle_after),
        rss_kib: (baseline_rss, *peak.lock().unwrap(), after_rss),
        outcomes: std::mem::take(&mut *normal.lock().unwrap()),
    };
    let mut report = verdict(&stack, &name, measured, &rapid, &count).await;
    stack.keep_logs_of(&mut report, &name);
    report
}

/// What was read of the replica and the ordinary clients around the floods.
struct Measured {
    unlimited: bool,
    /// CPU cores before and after the floods, with the ordinary clients sending.
    cores: (f64, f64),
    /// CPU cores with nothing sent, before the ordinary clients start and once they and
    /// the floods are done.
    idle: (f64, f64),
    /// RSS before, at its peak and after, in KiB.
    rss_kib: (u64, u64, u64),
    outcomes: Vec<Outcome>,
}

/// The row: the ledger read, every number in its notes, every bound checked.
async fn verdict(stack: &Stack, name: &str, m: Measured, rapid: &Phase, count: &Phase) -> Report {
    let Measured {
        unlimited,
        cores: (baseline_cores, after_cores),
        idle: (idle_before, idle_after),
        rss_kib: (baseline_rss, peak_rss, after_rss),
        outcomes,
    } = m;

    let mut report = Report {
        scenario: name.to_string(),
        requests: outcomes.len(),
        ..Default::default()
    };
    let ledger = stack.ledger().await;
    report.executions = ledger.total;
    report.duplicates = ledger.duplicates();
    let flood_executions: u64 = (ledger.keys.iter())
        .filter(|(k, _)| k.starts_with("h2flood-"))
        .map(|(_, n)| n)
        .sum();
    let (p50, p99) = percentiles(&outcomes);
    let ok = outcomes.iter().filter(|o| o.is_ok()).count();
    let mib = |kb: u64| kb / 1024;
    report.notes.push(format!(
        "{}ordinary HTTP/1.1 clients {ok}/{} ok, p50 {p50} ms, p99 {p99} ms; replica RSS {} MiB \
         before, peak {} MiB, {} MiB after; replica CPU {baseline_cores:.2} cores before, \
         {after_cores:.2} after, idle {idle_before:.3} before, {idle_after:.3} after; {}; {}",
        if unlimited { "LIMITS OFF: " } else { "" },
        outcomes.len(),
        mib(baseline_rss),
        mib(peak_rss),
        mib(after_rss),
        rapid.note(),
        count.note(),
    ));
    judge(
        &mut report,
        &[rapid, count],
        &outcomes,
        (p99, flood_executions),
    );
    let growth = mib(peak_rss.saturating_sub(baseline_rss));
    if growth > RSS_GROWTH_MIB {
        report.fail(format!(
            "RSS grew {growth} MiB over its baseline (bound {RSS_GROWTH_MIB})"
        ));
    }
    if idle_after > idle_before + IDLE_CORES {
        report.fail(format!(
            "the replica used {idle_after:.3} cores idle after the floods, {idle_before:.3} before"
        ));
    }
    report
}

/// The verdict on the floods and the ordinary clients (RSS and idle CPU are judged by
/// the caller).
fn judge(report: &mut Report, phases: &[&Phase], outcomes: &[Outcome], (p99, flooded): (u64, u64)) {
    for p in phases {
        let survived = FloodTally::get(&p.tally.survived);
        if survived > 0 {
            report.fail(format!(
                "{:?}: {survived} attacking connections were still served when their attacker stopped",
                p.kind
            ));
        }
        if FloodTally::get(&p.tally.streams) == 0 {
            report.fail(format!("{:?}: no stream was written", p.kind));
        }
        if p.per_connection_ms() > CPU_PER_CONNECTION_MS {
            report.fail(format!(
                "{:?}: {:.1} ms of replica CPU per flood connection (bound {CPU_PER_CONNECTION_MS})",
                p.kind,
                p.per_connection_ms()
            ));
        }
    }
    let failed = outcomes.iter().filter(|o| o.is_err()).count();
    if outcomes.is_empty() || failed > 0 {
        report.fail(format!(
            "{failed} of {} ordinary requests failed: {}",
            outcomes.len(),
            failures(outcomes)
        ));
    }
    if p99 > NORMAL_P99_MS {
        report.fail(format!(
            "ordinary requests' p99 was {p99} ms (bound {NORMAL_P99_MS})"
        ));
    }
    if report.duplicates > 0 {
        report.fail(format!("{} duplicate executions", report.duplicates));
    }
    if flooded > 0 {
        report.fail(format!(
            "{flooded} flood streams (no body sent) reached the upstream"
        ));
    }
}
