//! From findings to a report: the timeline of the first keys behind any deviation, and
//! the verdicts (what is always a violation, and what a mode may only measure).

use crate::cluster::Ledger;
use crate::driver::{Exchange, Got};

use super::keys::{Findings, Groups};
use super::*;

/// Evidence: the timeline of the first few keys behind any deviation.
pub(super) fn timelines(
    report: &mut Report,
    groups: &Groups,
    ledger: &Ledger,
    deviations: [&Vec<String>; 5],
) {
    let [dups, replay_mismatch, lost, replaced, divergent] = deviations;
    let mut suspects: Vec<&str> = Vec::new();
    for line in dups
        .iter()
        .chain(divergent)
        .chain(replay_mismatch)
        .chain(lost)
        .chain(replaced)
    {
        if let Some(key) = groups
            .keys()
            .map(|(_, k)| k.as_str())
            .find(|k| line.contains(&format!("{k} ")) || line.contains(&format!("{k}:")))
        {
            if !suspects.contains(&key) {
                suspects.push(key);
            }
        }
        if suspects.len() >= 3 {
            break;
        }
    }
    for key in suspects {
        let mut lines = vec![format!(
            "timeline of {key} (executions: {}):",
            ledger.keys.get(key).copied().unwrap_or(0)
        )];
        let mut ex: Vec<&Exchange> = groups
            .iter()
            .filter(|((_, k), _)| k == key)
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        ex.sort_by_key(|e| e.sent_ms);
        // Runs of the same answer (409s while a lease is held) collapse into one line.
        let mut last: Option<(String, u64, u64, usize)> = None;
        let mut rows = Vec::new();
        for e in ex {
            let got = match &e.got {
                Got::Resp(r) => short(r),
                Got::Timeout => "timeout".into(),
                Got::Error(_) => "connection error".into(),
            };
            let label = format!("tenant-{} {:?} {got}", e.req.tenant, e.phase);
            match &mut last {
                Some((l, _, end, n)) if *l == label => {
                    *end = e.done_ms;
                    *n += 1;
                }
                _ => {
                    rows.extend(last.take());
                    last = Some((label, e.sent_ms, e.done_ms, 1));
                }
            }
        }
        rows.extend(last);
        for (label, from, to, n) in rows.into_iter().take(60) {
            let times = if n > 1 {
                format!(" x{n}")
            } else {
                String::new()
            };
            lines.push(format!("    {from:>6}-{to:>6} ms  {label}{times}"));
        }
        report.details.push(lines.join("\n"));
    }
}

/// The verdicts: what is always a violation, and what the mode may only measure.
pub(super) fn verdicts(
    report: &mut Report,
    expect: Expect,
    f: &Findings,
    cross_tenant: &Vec<String>,
    dups: &Vec<String>,
    unknown: &Vec<String>,
) {
    let flag = |items: &Vec<String>, label: &str, fatal: bool, report: &mut Report| {
        if items.is_empty() {
            return;
        }
        let line = format!("{label}: {}", list(items.iter(), 8));
        if fatal {
            report.violations.push(line);
        } else {
            report.measured.push(line);
        }
    };
    flag(cross_tenant, "replay across tenants", true, report);
    flag(&f.cross_key, "response for another key", true, report);
    flag(
        &f.replay_mismatch,
        "replay not byte-identical",
        true,
        report,
    );
    flag(&f.never_stored, "release status stored", true, report);
    flag(unknown, "executions of keys never sent", true, report);
    flag(dups, "duplicate executions", expect.exactly_once, report);
    flag(
        &f.dup_mismatch,
        "replays switching between duplicate executions",
        expect.exactly_once,
        report,
    );
    flag(
        &f.lost,
        "acknowledged responses lost",
        expect.durable,
        report,
    );
    flag(
        &f.replaced,
        "acknowledged responses replaced by a duplicate execution",
        expect.exactly_once,
        report,
    );
    flag(
        &f.divergent,
        "keys answered with two different 2xx responses",
        expect.exactly_once,
        report,
    );
}
