//! The checker: after the run, the invariants over every recorded exchange and the
//! demo upstream's execution ledger.
//!
//! * executions per key as promised (one per tenant using the key; none for keys the
//!   upstream refuses; two for a key taken over from a frozen holder);
//! * every replay (`Idempotent-Replayed: true`) byte-identical (status, headers minus
//!   `Date`/`X-Request-Id`, body) to the original first response of its (tenant, key);
//! * no replay across tenants (an execution number seen by two tenants), nor across
//!   keys (a body naming another key);
//! * no acknowledged response lost: every (tenant, key) that got a 2xx first execution
//!   replays it in the final pass (and, with Postgres, again after Redis is flushed);
//! * one answer per key: every 2xx a (tenant, key) received, first execution or replay,
//!   in any phase, is the same response (status, headers, body); two different ones
//!   mean two stored responses for one key (two sides of a partition each ran it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::cluster::Ledger;
use crate::driver::{Exchange, Got, KeyClass, Phase, Plan, Req, Resp};

/// What the scenario promises.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Extra executions are a failure (else they are measured and reported).
    pub exactly_once: bool,
    /// A lost acknowledged response is a failure (else it is measured).
    pub durable: bool,
}

#[derive(Debug, Default)]
pub struct Report {
    pub scenario: String,
    pub requests: usize,
    pub executions: u64,
    pub duplicates: u64,
    pub lost: usize,
    /// Broken invariants, with evidence: the verdict is FAIL.
    pub violations: Vec<String>,
    /// Deviations the scenario's mode allows (its window): the verdict is MEASURED.
    pub measured: Vec<String>,
    /// Short facts for the table.
    pub notes: Vec<String>,
    /// Longer evidence printed with the row.
    pub details: Vec<String>,
    /// Why the scenario did not run here (no network namespaces, ...): SKIPPED.
    pub skipped: Option<String>,
}

impl Report {
    pub fn verdict(&self) -> &'static str {
        if self.skipped.is_some() {
            "SKIPPED"
        } else if !self.violations.is_empty() {
            "FAIL"
        } else if !self.measured.is_empty() {
            "MEASURED"
        } else {
            "PASS"
        }
    }

    pub fn fail(&mut self, why: impl Into<String>) {
        self.violations.push(why.into());
    }
}

/// A response the gateway stores (so a replay must reproduce it): a 2xx, or the 502/504
/// problems stored for an upstream that acted (response too large, `on_ambiguous = "store"`).
fn storable(r: &Resp) -> bool {
    (200..300).contains(&r.status)
        || matches!(
            r.problem_code().as_deref(),
            Some("upstream_outcome_unknown" | "upstream_response_too_large")
        )
}

fn short(r: &Resp) -> String {
    let exec = r
        .execution()
        .map(|(n, _)| format!(" exec#{n}"))
        .unwrap_or_default();
    let code = r
        .problem_code()
        .map(|c| format!(" {c}"))
        .unwrap_or_default();
    format!(
        "{}{}{exec}{code}",
        r.status,
        if r.is_replay() { " replay" } else { "" }
    )
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>, max: usize) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    let n = items.len();
    let mut s = items.into_iter().take(max).collect::<Vec<_>>().join(", ");
    if n > max {
        let _ = write!(s, ", ... ({n} in all)");
    }
    s
}

/// Runs every check. `ledger` is read after the final passes.
pub fn check(
    scenario: &str,
    expect: Expect,
    plans: &[Plan],
    exchanges: &[Exchange],
    ledger: &Ledger,
    requests: usize,
) -> Report {
    let mut report = Report {
        scenario: scenario.to_string(),
        requests,
        executions: ledger.total,
        ..Default::default()
    };
    // Exchanges per (tenant, key).
    let mut groups: Groups = BTreeMap::new();
    for e in exchanges {
        groups
            .entry((e.req.tenant, e.req.key.clone()))
            .or_default()
            .push(e);
    }
    let classes: Classes = plans
        .iter()
        .map(|p| (p.key.as_str(), (p.class, p.reqs.len())))
        .collect();

    // Load-phase status mix, for the notes.
    let mut mix: BTreeMap<String, usize> = BTreeMap::new();
    for e in exchanges.iter().filter(|e| e.phase == Phase::Load) {
        let k = match &e.got {
            Got::Resp(r) if r.is_replay() => "replay".to_string(),
            Got::Resp(r) => r.status.to_string(),
            Got::Timeout => "timeout".to_string(),
            Got::Error(_) => "conn-error".to_string(),
        };
        *mix.entry(k).or_default() += 1;
    }

    let f = examine_keys(&groups, &classes, ledger);
    // Cross-tenant: one execution's body seen by two tenants.
    let mut cross_tenant: Vec<String> = f
        .executions_by_tenant
        .iter()
        .filter(|(_, t)| t.len() > 1)
        .map(|(n, t)| format!("exec#{n} seen by tenants {t:?}"))
        .collect();
    cross_tenant.sort();

    let (dups, takeovers, unknown) = count_executions(ledger, &classes, &mut report);
    report.lost = f.lost.len() + f.replaced.len();

    report.notes.push(format!(
        "keys {} acked {}",
        plans.iter().map(|p| p.reqs.len()).sum::<usize>(),
        f.acked
    ));
    let interesting: Vec<String> = mix
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "201" | "replay"))
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    if !interesting.is_empty() {
        report.notes.push(interesting.join(" "));
    }
    if takeovers > 0 {
        report.notes.push(format!("takeovers {takeovers}"));
    }
    if !f.divergent.is_empty() {
        report
            .notes
            .push(format!("keys with two 2xx answers {}", f.divergent.len()));
    }
    if f.acked == 0 {
        report.fail("no key was acknowledged: the run made no progress");
    }

    let deviations = [
        &dups,
        &f.replay_mismatch,
        &f.lost,
        &f.replaced,
        &f.divergent,
    ];
    timelines(&mut report, &groups, ledger, deviations);
    verdicts(&mut report, expect, &f, &cross_tenant, &dups, &unknown);
    report
}

/// What the exchanges of each (tenant, key) showed.
#[derive(Default)]
struct Findings {
    acked: usize,
    replay_mismatch: Vec<String>,
    dup_mismatch: Vec<String>,
    cross_key: Vec<String>,
    lost: Vec<String>,
    replaced: Vec<String>,
    never_stored: Vec<String>,
    /// (tenant, key)s that received two or more different 2xx responses.
    divergent: Vec<String>,
    executions_by_tenant: HashMap<u64, HashSet<usize>>,
}

type Groups<'a> = BTreeMap<(usize, String), Vec<&'a Exchange>>;
type Classes<'a> = HashMap<&'a str, (KeyClass, usize)>;

/// Replays, acknowledgements and bodies, key by key.
fn examine_keys(groups: &Groups, classes: &Classes, ledger: &Ledger) -> Findings {
    let mut acked = 0usize;
    let mut replay_mismatch = Vec::new();
    let mut dup_mismatch = Vec::new();
    let mut cross_key = Vec::new();
    let mut lost = Vec::new();
    let mut replaced = Vec::new();
    let mut executions_by_tenant: HashMap<u64, HashSet<usize>> = HashMap::new();
    let mut never_stored = Vec::new();
    let mut divergent = Vec::new();

    for ((tenant, key), ex) in groups {
        let mut ex = ex.clone();
        ex.sort_by_key(|e| e.done_ms);
        let resps: Vec<(&Exchange, &Resp)> = ex
            .iter()
            .filter_map(|e| match &e.got {
                Got::Resp(r) => Some((*e, r)),
                _ => None,
            })
            .collect();
        for (_, r) in &resps {
            if (200..300).contains(&r.status) {
                match r.execution() {
                    Some((n, k)) => {
                        if &k != key {
                            cross_key.push(format!(
                                "tenant-{tenant} key {key} got a body for key {k} (exec#{n})"
                            ));
                        }
                        executions_by_tenant.entry(n).or_default().insert(*tenant);
                    }
                    None => cross_key.push(format!(
                        "tenant-{tenant} key {key}: 2xx body is not the upstream's: {:?}",
                        String::from_utf8_lossy(&r.body)
                    )),
                }
            }
        }
        let mut distinct: Vec<&Resp> = Vec::new();
        for (_, r) in resps.iter().filter(|(_, r)| (200..300).contains(&r.status)) {
            if !distinct.iter().any(|d| d.same_as(r)) {
                distinct.push(r);
            }
        }
        if distinct.len() > 1 {
            divergent.push(format!(
                "tenant-{tenant} key {key}: {} different 2xx answers ({})",
                distinct.len(),
                list(distinct.iter().map(|r| short(r)), 3)
            ));
        }
        let firsts: Vec<&Resp> = resps
            .iter()
            .filter(|(_, r)| !r.is_replay() && storable(r))
            .map(|(_, r)| *r)
            .collect();
        let original = firsts.first().copied();
        let replays: Vec<(&Exchange, &Resp)> = resps
            .iter()
            .filter(|(_, r)| r.is_replay())
            .copied()
            .collect();
        if classes.get(key.as_str()).map(|c| c.0) == Some(KeyClass::NeverExecutes)
            && !replays.is_empty()
        {
            never_stored.push(format!(
                "tenant-{tenant} key {key}: {} replays of a response that must not be stored",
                replays.len()
            ));
        }
        for (e, r) in &replays {
            let reference = original.or(replays.first().map(|x| x.1));
            let Some(reference) = reference else { continue };
            if r.same_as(reference) {
                continue;
            }
            let what = format!(
                "tenant-{tenant} key {key} ({:?} at {} ms): replay {} differs from the original {}",
                e.phase,
                e.done_ms,
                short(r),
                short(reference)
            );
            // A replay of another execution of this very key, when the key ran more
            // often than planned: the duplicate's response replaced the stored one
            // (the duplicate's own client may have timed out, so it is not among the
            // firsts). What the mode's duplicates explain, not a corrupt replay.
            let duplicate_of_this_key = r.execution().is_some_and(|(_, k)| &k == key)
                && ledger.keys.get(key.as_str()).copied().unwrap_or(0)
                    > expected_executions(classes.get(key.as_str()).copied());
            if firsts.iter().any(|f| r.same_as(f)) || duplicate_of_this_key {
                dup_mismatch.push(what);
            } else {
                replay_mismatch.push(what);
            }
        }
        // Acknowledged: a 2xx first execution (or, for a late key, a 2xx replay)
        // reached this tenant during the run.
        let class = classes.get(key.as_str()).map(|c| c.0);
        let acks: Vec<&Resp> = ex
            .iter()
            .filter(|e| e.phase == Phase::Load)
            .filter_map(|e| match &e.got {
                Got::Resp(r) if acknowledges(r, class) => Some(r),
                _ => None,
            })
            .collect();
        if acks.is_empty() {
            continue;
        }
        acked += 1;
        // The original acknowledged response must be what the final passes replay. A
        // replay of a later acknowledged execution means the original was replaced by
        // a duplicate (counted as lost, attributed to the duplicate); a replay of
        // nothing acknowledged (or no replay) is lost outright.
        let original_ack = acks[0];
        for phase in [Phase::Final, Phase::Durable] {
            let last = ex.iter().rev().find(|e| e.phase == phase);
            let Some(last) = last else {
                continue; // that pass did not run
            };
            let got = match &last.got {
                Got::Resp(r) => short(r),
                other => format!("{other:?}"),
            };
            let what = format!(
                "tenant-{tenant} key {key}: acknowledged {}, {phase:?} pass got {got}",
                list(acks.iter().map(|a| short(a)), 3)
            );
            match &last.got {
                Got::Resp(r) if r.is_replay() && r.same_as(original_ack) => continue,
                Got::Resp(r) if r.is_replay() && acks.iter().any(|a| r.same_as(a)) => {
                    replaced.push(what)
                }
                _ => lost.push(what),
            }
            break;
        }
    }
    Findings {
        acked,
        replay_mismatch,
        dup_mismatch,
        cross_key,
        lost,
        replaced,
        never_stored,
        divergent,
        executions_by_tenant,
    }
}

/// How many executions the plan allows a key of `class` used by `tenants` tenants
/// (none for a key never planned).
fn expected_executions(planned: Option<(KeyClass, usize)>) -> u64 {
    match planned {
        None => 0,
        Some((KeyClass::Normal | KeyClass::Late, tenants)) => tenants as u64,
        Some((KeyClass::NeverExecutes, _)) => 0,
        Some((KeyClass::Takeover, tenants)) => tenants as u64 + 1,
    }
}

/// Executions per key against the plan: duplicates (counted in `report`), takeovers,
/// and executions of keys never sent.
fn count_executions(
    ledger: &Ledger,
    classes: &Classes,
    report: &mut Report,
) -> (Vec<String>, u64, Vec<String>) {
    // Executions per key against the plan.
    let mut dups = Vec::new();
    let mut takeovers = 0u64;
    let mut unknown = Vec::new();
    for (key, &count) in &ledger.keys {
        let Some(&(class, tenants)) = classes.get(key.as_str()) else {
            unknown.push(format!("{key} x{count}"));
            continue;
        };
        if class == KeyClass::Takeover {
            takeovers += count.saturating_sub(tenants as u64).min(1);
        }
        let expected = expected_executions(Some((class, tenants)));
        if count > expected {
            report.duplicates += count - expected;
            dups.push(format!("{key} executed {count}x (expected {expected})"));
        }
    }
    dups.sort();
    (dups, takeovers, unknown)
}

/// Evidence: the timeline of the first few keys behind any deviation.
fn timelines(report: &mut Report, groups: &Groups, ledger: &Ledger, deviations: [&Vec<String>; 5]) {
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
fn verdicts(
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

/// Whether `r`, received during the run for a key of `class`, acknowledges it: a 2xx
/// first execution, or for a [`KeyClass::Late`] key (whose clients give up before the
/// upstream answers) a 2xx replay too.
fn acknowledges(r: &Resp, class: Option<KeyClass>) -> bool {
    (200..300).contains(&r.status) && (!r.is_replay() || class == Some(KeyClass::Late))
}

/// The (tenant, key) requests acknowledged during the run ([`acknowledges`]).
pub fn acknowledged(exchanges: &[Exchange], plans: &[Plan]) -> Vec<Arc<Req>> {
    let late: HashSet<&str> = (plans.iter())
        .filter(|p| p.class == KeyClass::Late)
        .map(|p| p.key.as_str())
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for e in exchanges.iter().filter(|e| e.phase == Phase::Load) {
        if let Got::Resp(r) = &e.got {
            let class = late.contains(e.req.key.as_str()).then_some(KeyClass::Late);
            if acknowledges(r, class) && seen.insert((e.req.tenant, e.req.key.clone())) {
                out.push(e.req.clone());
            }
        }
    }
    out
}
