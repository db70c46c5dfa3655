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

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::cluster::Ledger;
use crate::driver::{Exchange, Got, KeyClass, Phase, Plan, Req, Resp};

mod keys;
mod verdicts;

use keys::{count_executions, examine_keys, Classes, Groups};
use verdicts::{timelines, verdicts};

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
