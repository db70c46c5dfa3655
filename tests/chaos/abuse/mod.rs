//! The abuse scenario: many slow readers of a large stored
//! response plus a burst of new connections, against one replica of the real fleet.
//! The replica must stay within its memory budget and keep serving other clients.
//!
//! A 6 MiB response is stored under one key (an in-process upstream on a second route;
//! the replay cache is off, so every replay is a fresh copy from Redis, the worst
//! case). Then, for 12 s, against replica 0 directly:
//! - 120 slow readers, starting 25 ms apart, replay it over sockets with a 16 KiB
//!   receive buffer, reading 1 KiB every 250 ms (4 KiB/s); when the replica closes
//!   the connection or answers 503 they wait a little over 1 s (its `Retry-After`)
//!   and come back;
//! - at 3 s, a burst of 600 new connections that send half a request head and stall;
//! - 8 normal clients send small keyed requests (new keys, 20 ms upstream), half to
//!   replica 0 directly, half through HAProxy, retrying a 503, 409 or connection
//!   error up to 5 times, 250 ms apart.
//!
//! Replica 0's RSS (`/proc/<pid>/status`) is sampled every 100 ms. Verdict: FAIL if its
//! peak (`VmHWM`) exceeds [`RSS_BOUND_MIB`], if service to the normal clients
//! collapses (fewer than 90% of their requests succeed, or their p99 exceeds 5 s), if
//! a key ran twice, or if the replica does not give back its buffers and serve a new
//! connection once the attack ends; MEASURED if some normal requests failed (how, in
//! the row: a replay refused for want of budget has already been fetched from Redis,
//! so refused readers coming back keep Redis busy, and other clients' claims queue
//! behind those fetches); PASS otherwise.
//! `CHAOS_ABUSE_UNLIMITED=1` runs the same attack with the limits set out of reach,
//! to show that the verdict can fail.

pub mod parties;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::abuse::parties::{
    big_upstream, buffered_after_attack, failures, limited_summary, normal_client, post_big, rss,
    sample_rss, slow_reader, stalled_head, Outcome, Tally, BIG,
};
use crate::checker::Report;
use crate::cluster::{Durability, Options, Stack};

const SLOW_READERS: usize = 120;
const BURST: usize = 600;
const NORMAL_WORKERS: usize = 8;
const ATTACK: Duration = Duration::from_secs(12);
/// Limit on replica 0's peak RSS, from its configuration: the buffer budget (64 MiB),
/// plus what the requests in flight (32) may hold while being answered (6 MiB each),
/// plus the process itself (under 20 MiB idle): 276 MiB, rounded up for the allocator.
pub const RSS_BOUND_MIB: u64 = 320;

/// The limits the replicas run with, or (`unlimited`) values no attack here reaches.
fn server_limits(unlimited: bool) -> &'static str {
    if unlimited {
        "max_connections = 1000000\nmax_concurrent_requests = 1000000\n\
         buffer_budget = \"64GiB\"\nwrite_timeout = \"1h\"\nheader_read_timeout = \"2s\"\n"
    } else {
        "max_connections = 256\nmax_concurrent_requests = 32\nbuffer_budget = \"64MiB\"\n\
         write_timeout = \"2s\"\nheader_read_timeout = \"2s\"\n"
    }
}

/// Many slow readers of a large stored response plus a burst of stalled connections
/// against replica 0: its memory stays bounded and it keeps serving (the module's doc).
pub async fn slow_readers_and_a_connection_burst(name: String) -> Report {
    let unlimited = std::env::var_os("CHAOS_ABUSE_UNLIMITED").is_some();
    let stack = start_stack(unlimited).await;
    let target: SocketAddr = ([127, 0, 0, 1], stack.replicas[0].port).into();
    let pid = stack.replicas[0].pid().expect("replica 0 runs");
    let mut report = Report {
        scenario: name.clone(),
        ..Default::default()
    };

    let stored = post_big(&stack.http, target).await;
    assert_eq!(stored, Some(BIG), "the big response was not stored");
    let baseline = rss(pid).map_or(0, |(now, _)| now);

    let attacked = attack(&stack, target, pid, &name).await;

    // The attack is over: buffers must come back and a new connection be served.
    let buffered = buffered_after_attack(&stack, Duration::from_millis(100)).await;
    let after = stack
        .http
        .get(format!("http://{target}/v1/ping"))
        .send()
        .await
        .map(|r| r.status().as_u16());

    let normal = Normal::of(&attacked.times);
    let haproxy_log = std::fs::read_to_string(stack.dir.path().join("haproxy.log"));
    let down = haproxy_log.unwrap_or_default().matches(" is DOWN").count();
    let ledger = stack.ledger().await;
    println!("abuse: checks done at {:?}", attacked.started.elapsed());
    report.requests = attacked.times.len();
    report.executions = ledger.total;
    report.duplicates = ledger.duplicates();
    let limited = limited_summary(
        &stack,
        &[
            "max_connections",
            "max_in_flight",
            "buffer_budget",
            "write_timeout",
        ],
    )
    .await;
    let seen = Seen {
        unlimited,
        baseline,
        down,
        limited,
    };
    note_what_was_seen(&mut report, &attacked, &normal, &seen);
    verdict(&mut report, &attacked, &normal, buffered, after);
    stack.keep_logs_of(&mut report, &name);
    report
}

/// The fleet under attack: one replica set with [`server_limits`], a second route to an
/// upstream of large responses, and the replay cache off.
async fn start_stack(unlimited: bool) -> Stack {
    let big = big_upstream().await;
    let opts = Options {
        durability: Durability::RedisOnly,
        server: server_limits(unlimited).into(),
        extra: format!(
            "[[routes]]\nname = \"bulk\"\npath_prefix = \"/bulk/\"\nupstream = \"http://{big}\"\n\
             upstream_timeout = \"5s\"\n[replay_cache]\nmax_bytes = \"0B\"\n"
        ),
        ..Options::default()
    };
    Stack::start(opts).await
}

/// What the attack left: when it started, the attackers' tallies, each normal request's
/// outcome, and replica 0's peak RSS (sampled) and VmHWM, in KiB.
struct Attacked {
    started: Instant,
    slow: Arc<Tally>,
    burst: Arc<Tally>,
    times: Vec<Outcome>,
    peak_rss: u64,
    hwm: u64,
}

/// The attack on `target` (replica 0, pid `pid`) for [`ATTACK`]: slow readers, normal
/// clients, and at 3 s the burst; returns once every party is done.
async fn attack(stack: &Stack, target: SocketAddr, pid: u32, name: &str) -> Attacked {
    let started = Instant::now();
    let until = started + ATTACK;
    let peak = Arc::new(Mutex::new(0u64));
    let sampler = tokio::spawn(sample_rss(pid, until, peak.clone()));
    let slow = Arc::new(Tally::default());
    let readers: Vec<_> = (0..SLOW_READERS)
        .map(|i| {
            let delay = Duration::from_millis(25 * i as u64);
            tokio::spawn(slow_reader(target, delay, until, slow.clone()))
        })
        .collect();
    let normal = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..NORMAL_WORKERS)
        .map(|w| {
            let base = if w % 2 == 0 {
                format!("http://{target}")
            } else {
                stack.front()
            };
            let key = format!("{}-n{w}", name.replace(['[', ']', '=', ' '], "_"));
            tokio::spawn(normal_client(base, key, until, normal.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let burst = Arc::new(Tally::default());
    let bursting: Vec<_> = (0..BURST)
        .map(|_| tokio::spawn(stalled_head(target, until, burst.clone())))
        .collect();

    println!("abuse: burst sent at {:?}", started.elapsed());
    for (i, task) in (readers.into_iter().chain(bursting)).enumerate() {
        if task.await.is_err() {
            println!("abuse: attacker {i} panicked");
        }
    }
    println!("abuse: attackers done at {:?}", started.elapsed());
    for task in workers {
        let _ = task.await;
    }
    let _ = sampler.await;
    println!("abuse: clients done at {:?}", started.elapsed());
    let peak_rss = *peak.lock().unwrap();
    let hwm = rss(pid).map_or(0, |(_, hwm)| hwm);
    let times = std::mem::take(&mut *normal.lock().unwrap());
    Attacked {
        started,
        slow,
        burst,
        times,
        peak_rss,
        hwm,
    }
}

/// The normal clients' service: the times of their successful requests (ms), the
/// median and 99th percentile of those, and the share that succeeded.
struct Normal {
    ok: Vec<u64>,
    p50: u64,
    p99: u64,
    success: f64,
}

impl Normal {
    /// The service the normal requests' outcomes `times` show.
    fn of(times: &[Outcome]) -> Normal {
        let ok: Vec<u64> = times
            .iter()
            .filter_map(|t| t.as_ref().ok().copied())
            .collect();
        let mut sorted = ok.clone();
        sorted.sort_unstable();
        let pct =
            |p: f64| sorted.get(((sorted.len() as f64 * p) as usize).min(sorted.len().max(1) - 1));
        let (p50, p99) = (
            pct(0.5).copied().unwrap_or(0),
            pct(0.99).copied().unwrap_or(0),
        );
        let success = ok.len() as f64 / times.len().max(1) as f64;
        Normal {
            ok,
            p50,
            p99,
            success,
        }
    }
}

/// What the row notes besides the attack's figures: whether the limits were off,
/// replica 0's RSS before it (KiB), how often HAProxy marked a replica down, and which
/// limits refused what.
struct Seen {
    unlimited: bool,
    baseline: u64,
    down: usize,
    limited: String,
}

/// The row's note: the normal clients' service, replica 0's memory, the attackers'
/// tallies, HAProxy's and the limits' doing.
fn note_what_was_seen(report: &mut Report, a: &Attacked, n: &Normal, seen: &Seen) {
    let (times, ok, slow, burst) = (&a.times, &n.ok, &a.slow, &a.burst);
    let (p50, p99, down, limited) = (n.p50, n.p99, seen.down, &seen.limited);
    let mib = |kb: u64| kb / 1024;
    report.notes.push(format!(
        "{}normal clients {}/{} ok ({:.1}%), p50 {p50} ms, p99 {p99} ms{}; \
         replica 0 RSS {} MiB before, peak {} MiB (VmHWM {} MiB, bound {RSS_BOUND_MIB}); \
         slow readers: {} replays, {} served, {} refused 503, {} cut, {} failed; \
         burst: {} of {BURST} connections closed by the replica, {} failed; \
         HAProxy marked a replica down {down} times; limited:{limited}",
        if seen.unlimited { "LIMITS OFF: " } else { "" },
        ok.len(),
        times.len(),
        n.success * 100.0,
        match failures(times) {
            f if f.is_empty() => f,
            f => format!(" (failed: {f})"),
        },
        mib(seen.baseline),
        mib(a.peak_rss),
        mib(a.hwm),
        Tally::get(&slow.attempts),
        Tally::get(&slow.served),
        Tally::get(&slow.refused),
        Tally::get(&slow.cut),
        Tally::get(&slow.failed),
        Tally::get(&burst.cut),
        Tally::get(&burst.failed),
    ));
}

/// Fails `report` when replica 0 went over its memory bound, the normal clients' service
/// collapsed, a key ran twice, buffers stayed charged (`buffered` bytes) or a new
/// connection was not served (`after`); notes failed normal requests as measured.
fn verdict(
    report: &mut Report,
    a: &Attacked,
    n: &Normal,
    buffered: f64,
    after: Result<u16, reqwest::Error>,
) {
    let (times, ok, success, p99) = (&a.times, &n.ok, n.success, n.p99);
    let mib = |kb: u64| kb / 1024;
    if mib(a.hwm) > RSS_BOUND_MIB {
        report.fail(format!(
            "replica 0 peaked at {} MiB of RSS, over its bound of {RSS_BOUND_MIB} MiB",
            mib(a.hwm)
        ));
    }
    if success < 0.90 {
        report.fail(format!(
            "only {:.1}% of the normal requests succeeded",
            success * 100.0
        ));
    } else if ok.len() < times.len() {
        report.measured.push(format!(
            "{} of {} normal requests failed after 5 attempts: {}",
            times.len() - ok.len(),
            times.len(),
            failures(times)
        ));
    }
    if p99 > 5000 {
        report.fail(format!("normal requests' p99 was {p99} ms"));
    }
    if report.duplicates > 0 {
        report.fail(format!("{} duplicate executions", report.duplicates));
    }
    if buffered != 0.0 {
        report.fail(format!("{buffered} bytes still charged after the attack"));
    }
    if !matches!(after, Ok(200..=299)) {
        report.fail(format!("replica 0 after the attack: {after:?}"));
    }
}
