//! Key by key: what the exchanges of each (tenant, key) showed (replays, acknowledgements,
//! bodies), and the executions the upstream's ledger counted against those promised.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::cluster::Ledger;
use crate::driver::{Exchange, Got, KeyClass, Phase, Resp};

use super::*;

/// What the exchanges of each (tenant, key) showed.
#[derive(Default)]
pub(super) struct Findings {
    pub(super) acked: usize,
    pub(super) replay_mismatch: Vec<String>,
    pub(super) dup_mismatch: Vec<String>,
    pub(super) cross_key: Vec<String>,
    pub(super) lost: Vec<String>,
    pub(super) replaced: Vec<String>,
    pub(super) never_stored: Vec<String>,
    /// (tenant, key)s that received two or more different 2xx responses.
    pub(super) divergent: Vec<String>,
    pub(super) executions_by_tenant: HashMap<u64, HashSet<usize>>,
}

pub(super) type Groups<'a> = BTreeMap<(usize, String), Vec<&'a Exchange>>;
pub(super) type Classes<'a> = HashMap<&'a str, (KeyClass, usize)>;

/// Replays, acknowledgements and bodies, key by key.
pub(super) fn examine_keys(groups: &Groups, classes: &Classes, ledger: &Ledger) -> Findings {
    let mut f = Findings::default();
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
        f.check_bodies(*tenant, key, &resps);
        f.check_divergent(*tenant, key, &resps);
        f.check_replays(*tenant, key, &resps, classes, ledger);
        f.check_acknowledged(*tenant, key, &ex, classes);
    }
    f
}

impl Findings {
    /// Each 2xx body of `key` must be the upstream's for this very key; counts which
    /// tenants each execution reached.
    fn check_bodies(&mut self, tenant: usize, key: &str, resps: &[(&Exchange, &Resp)]) {
        for (_, r) in resps {
            if (200..300).contains(&r.status) {
                match r.execution() {
                    Some((n, k)) => {
                        if k != key {
                            self.cross_key.push(format!(
                                "tenant-{tenant} key {key} got a body for key {k} (exec#{n})"
                            ));
                        }
                        self.executions_by_tenant
                            .entry(n)
                            .or_default()
                            .insert(tenant);
                    }
                    None => self.cross_key.push(format!(
                        "tenant-{tenant} key {key}: 2xx body is not the upstream's: {:?}",
                        String::from_utf8_lossy(&r.body)
                    )),
                }
            }
        }
    }

    /// Notes a key that received two or more different 2xx responses.
    fn check_divergent(&mut self, tenant: usize, key: &str, resps: &[(&Exchange, &Resp)]) {
        let mut distinct: Vec<&Resp> = Vec::new();
        for (_, r) in resps.iter().filter(|(_, r)| (200..300).contains(&r.status)) {
            if !distinct.iter().any(|d| d.same_as(r)) {
                distinct.push(r);
            }
        }
        if distinct.len() > 1 {
            self.divergent.push(format!(
                "tenant-{tenant} key {key}: {} different 2xx answers ({})",
                distinct.len(),
                list(distinct.iter().map(|r| short(r)), 3)
            ));
        }
    }

    /// Each replay of `key` must be its original response (or a duplicate execution's,
    /// counted apart), and a key that must not be stored is never replayed.
    fn check_replays(
        &mut self,
        tenant: usize,
        key: &str,
        resps: &[(&Exchange, &Resp)],
        classes: &Classes,
        ledger: &Ledger,
    ) {
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
        if classes.get(key).map(|c| c.0) == Some(KeyClass::NeverExecutes) && !replays.is_empty() {
            self.never_stored.push(format!(
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
            let duplicate_of_this_key = r.execution().is_some_and(|(_, k)| k == key)
                && ledger.keys.get(key).copied().unwrap_or(0)
                    > expected_executions(classes.get(key).copied());
            if firsts.iter().any(|f| r.same_as(f)) || duplicate_of_this_key {
                self.dup_mismatch.push(what);
            } else {
                self.replay_mismatch.push(what);
            }
        }
    }

    /// A key acknowledged during the run (a 2xx first execution or, for a late key, a
    /// 2xx replay) must have its original acknowledged response replayed by the final
    /// passes; otherwise it was replaced or lost.
    fn check_acknowledged(
        &mut self,
        tenant: usize,
        key: &str,
        ex: &[&Exchange],
        classes: &Classes,
    ) {
        // Acknowledged: a 2xx first execution (or, for a late key, a 2xx replay)
        // reached this tenant during the run.
        let class = classes.get(key).map(|c| c.0);
        let acks: Vec<&Resp> = ex
            .iter()
            .filter(|e| e.phase == Phase::Load)
            .filter_map(|e| match &e.got {
                Got::Resp(r) if acknowledges(r, class) => Some(r),
                _ => None,
            })
            .collect();
        if acks.is_empty() {
            return;
        }
        self.acked += 1;
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
                    self.replaced.push(what)
                }
                _ => self.lost.push(what),
            }
            break;
        }
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
pub(super) fn count_executions(
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
