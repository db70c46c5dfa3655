//! The HTTP/2 attack rows' verdict: what was measured of the replica, the upstream and
//! the ordinary clients, judged against the bounds of [`crate::h2_attacks`].

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{NORMAL_P99_MS, RSS_GROWTH_MIB, RSS_GROWTH_STALLED_MIB};
use crate::checker::Report;
use crate::cluster::Stack;
use crate::h2_attacks::attackers::{Attack, AttackTally, Outcome};
use crate::h2_floods::IDLE_CORES;

const MIB: u64 = 1 << 20;

/// What was read of the replica, the upstream and the ordinary clients.
pub struct Measured {
    pub unlimited: bool,
    pub outcomes: Vec<Outcome>,
    /// The attack, and a second after it: the ordinary requests that count.
    pub window: (Instant, Instant),
    /// CPU cores before, during and after the attack, with the ordinary clients sending.
    pub cores: (f64, f64, f64),
    /// CPU cores with nothing sent, before the ordinary clients start and once they and
    /// the attack are done.
    pub idle: (f64, f64),
    /// RSS before, at its peak and after, in KiB.
    pub rss_kib: (u64, u64, u64),
    /// `idemgate_buffered_bytes` at its peak during the attack, and 5 s after at most.
    pub buffered: (u64, f64),
    pub upstream_peak: usize,
    pub limited: String,
}

/// The row of attack `kind`: the notes, and FAIL where an ordinary client, the
/// replica's memory, CPU or buffers, the ledger or the attack's own bound says so.
pub async fn verdict(
    stack: &Stack,
    name: &str,
    kind: Attack,
    t: &AttackTally,
    m: Measured,
) -> Report {
    let s = Service::of(&m);
    let mut report = Report {
        scenario: name.to_string(),
        requests: m.outcomes.len(),
        ..Default::default()
    };
    let ledger = stack.ledger().await;
    report.executions = ledger.total;
    report.duplicates = ledger.duplicates();
    note(&mut report, t, &m, &s);
    let n = AttackTally::n;
    let (before, peak, _) = m.rss_kib;
    let mib = |kb: u64| kb / 1024;
    let (during, ok, failed, p99) = (&s.during, &s.ok, &s.failed, s.p99);
    if during.is_empty() || !failed.is_empty() {
        report.fail(format!(
            "{} of {} ordinary requests during the attack were not answered 2xx: {failed:?}",
            during.len() - ok.len(),
            during.len()
        ));
    }
    if p99 > NORMAL_P99_MS {
        report.fail(format!(
            "ordinary requests' p99 was {p99} ms (bound {NORMAL_P99_MS})"
        ));
    }
    let growth = mib(peak.saturating_sub(before));
    let bound = match kind {
        Attack::StalledReaders => RSS_GROWTH_STALLED_MIB,
        _ => RSS_GROWTH_MIB,
    };
    if growth > bound {
        report.fail(format!(
            "RSS grew {growth} MiB over its baseline (bound {bound})"
        ));
    }
    if m.idle.1 > m.idle.0 + IDLE_CORES {
        report.fail(format!(
            "the replica used {:.3} cores idle after the attack, {:.3} before",
            m.idle.1, m.idle.0
        ));
    }
    if m.buffered.1 != 0.0 {
        report.fail(format!(
            "{} bytes still charged 5 s after the attack",
            m.buffered.1
        ));
    }
    if report.duplicates > 0 {
        report.fail(format!("{} duplicate executions", report.duplicates));
    }
    if n(&t.streams) == 0 && kind != Attack::IdleConnections {
        report.fail("no attacking stream was written");
    }
    attack_bounds(&mut report, kind, t, &m);
    report
        .details
        .extend(t.stories.lock().unwrap().iter().cloned());
    report
}

/// The ordinary clients' service during the attack's window: their outcomes in it, the
/// times of the 2xx ones (ms), the others by status and code, the median and 99th
/// percentile, and the share answered 2xx (%).
struct Service<'a> {
    during: Vec<&'a Outcome>,
    ok: Vec<u64>,
    failed: std::collections::BTreeMap<String, usize>,
    p50: u64,
    p99: u64,
    rate: f64,
}

impl Service<'_> {
    /// The service `m`'s ordinary outcomes show within its window.
    fn of(m: &Measured) -> Service<'_> {
        let during: Vec<&Outcome> = (m.outcomes.iter())
            .filter(|(at, ..)| (m.window.0..m.window.1).contains(at))
            .collect();
        let ok: Vec<u64> = (during.iter())
            .filter(|(_, s, ..)| (200..300).contains(s))
            .map(|(.., ms)| *ms)
            .collect();
        let mut failed = std::collections::BTreeMap::<String, usize>::new();
        for (_, status, code, _) in during.iter().filter(|(_, s, ..)| !(200..300).contains(s)) {
            *failed.entry(format!("{status} {code}")).or_default() += 1;
        }
        let mut sorted = ok.clone();
        sorted.sort_unstable();
        let pct =
            |p: f64| sorted.get(((sorted.len() as f64 * p) as usize).min(sorted.len().max(1) - 1));
        let (p50, p99) = (
            pct(0.5).copied().unwrap_or(0),
            pct(0.99).copied().unwrap_or(0),
        );
        let rate = 100.0 * ok.len() as f64 / during.len().max(1) as f64;
        Service {
            during,
            ok,
            failed,
            p50,
            p99,
            rate,
        }
    }
}

/// The row's note: the ordinary clients' service, the replica's memory and CPU, what
/// the attackers saw, the upstream's peak, the buffers and the limits' doing.
fn note(report: &mut Report, t: &AttackTally, m: &Measured, s: &Service) {
    let (during, ok, failed, p50, p99, rate) = (&s.during, &s.ok, &s.failed, s.p50, s.p99, s.rate);
    let n = AttackTally::n;
    let (before, peak, after) = m.rss_kib;
    let mib = |kb: u64| kb / 1024;
    report.notes.push(format!(
        "{}ordinary clients while attacked {}/{} ok ({rate:.1}%){}, p50 {p50} ms, p99 {p99} ms; \
         replica RSS {} MiB before, peak {} MiB, {} MiB after; CPU {:.2} cores before, {:.2} \
         during, {:.2} after, idle {:.3} before, {:.3} after; attack: {} connections ({} failed to connect), {} streams, \
         answers {} 2xx / {} 503 / {} other, GOAWAY on {}, closed by the replica {} (longest \
         {} ms), open at the end {} (oldest {} ms); upstream calls at once, peak {}; buffered \
         peak {:.1} MiB, {} bytes after; limited:{}",
        if m.unlimited { "LIMITS OFF: " } else { "" },
        ok.len(),
        during.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" (failed: {failed:?})")
        },
        mib(before),
        mib(peak),
        mib(after),
        m.cores.0,
        m.cores.1,
        m.cores.2,
        m.idle.0,
        m.idle.1,
        n(&t.connections),
        n(&t.connect_failed),
        n(&t.streams),
        n(&t.ok),
        n(&t.refused),
        n(&t.other),
        n(&t.goaway),
        n(&t.closed),
        t.longest_ms.load(Relaxed),
        n(&t.open_at_end),
        t.oldest_open_ms.load(Relaxed),
        m.upstream_peak,
        m.buffered.0 as f64 / MIB as f64,
        m.buffered.1,
        m.limited,
    ));
}

/// The bound each attack must meet.
fn attack_bounds(report: &mut Report, kind: Attack, t: &AttackTally, m: &Measured) {
    let longest = Duration::from_millis(t.longest_ms.load(Relaxed));
    let oldest = Duration::from_millis(t.oldest_open_ms.load(Relaxed));
    let lived = longest.max(oldest);
    match kind {
        Attack::StalledReaders => {
            // Two connections at once (a new one only once the replica closed one),
            // each at most its share: 8 MiB.
            if m.buffered.0 > 2 * 8 * MIB + MIB {
                report.fail(format!(
                    "{:.1} MiB charged at once for two stalled connections, more than their \
                     shares (2 x 8 MiB)",
                    m.buffered.0 as f64 / MIB as f64
                ));
            }
            let bound = Duration::from_secs(2 * 3 + 3);
            if lived > bound || AttackTally::n(&t.closed) == 0 {
                report.fail(format!(
                    "a stalled connection lived {lived:?} (bound {bound:?}), {} closed",
                    AttackTally::n(&t.closed)
                ));
            }
        }
        Attack::IdleConnections => {
            let bound = Duration::from_secs(3 + 3);
            if lived > bound || AttackTally::n(&t.closed) == 0 {
                report.fail(format!(
                    "an idle connection lived {lived:?} (bound {bound:?}), {} closed",
                    AttackTally::n(&t.closed)
                ));
            }
        }
        Attack::StreamSlots if m.upstream_peak > 2 * 32 => {
            report.fail(format!("{} stream-slot calls at the upstream at once, more than two connections' shares (64)", m.upstream_peak));
        }
        Attack::ResetAfterClaim if m.upstream_peak > 128 => {
            report.fail(format!(
                "{} reset calls at the upstream at once, more than max_concurrent_requests (128)",
                m.upstream_peak
            ));
        }
        Attack::DeclaredBodies if m.buffered.0 >= MIB => {
            report.fail(format!(
                "{} bytes charged for declared bodies never sent",
                m.buffered.0
            ));
        }
        _ => {}
    }
}
