//! A slow upstream: it answers three times later than the route's `upstream_timeout`,
//! and goes on when its caller hangs up (`?detach=true`), as a real service's work
//! does. Clients send keyed requests through HAProxy, so that retries cross replicas,
//! and retry on 504 and 409, waiting what `Retry-After` says, until another answer or
//! their bound. A gateway that cancels the call at `upstream_timeout` and releases the
//! key runs the upstream again for every retry (duplicates) and never stores its answer
//! (every key lost); one that lets the call go on under the key's lease answers the
//! retries 409 meanwhile, stores the upstream's answer and replays it to them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::checker::{Expect, Report};
use crate::cluster::{Options, Stack};
use crate::driver::{Exchange, Got, KeyClass, Phase, Plan, Workload};
use crate::harness::{finish, start};

/// The route's `upstream_timeout`.
const UPSTREAM_TIMEOUT: &str = "500ms";

/// The upstream's answer: three times the route's `upstream_timeout`.
const LATENCY_MS: u64 = 1500;

/// The call's hard limit, well past the upstream's answer: a line of the route.
const UPSTREAM_DEADLINE: &str = "upstream_deadline = \"30s\"\n";

/// Clients per (tenant, key): the driver's concurrent duplicates (`dup_ratio = 1.0`).
const SENDERS: usize = 3;

/// Longest a client waits on one `Retry-After`.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(5);

/// A client stops retrying this long after its first attempt.
const CLIENT_BOUND: Duration = Duration::from_secs(15);

const EXACTLY_ONCE: Expect = Expect {
    exactly_once: true,
    durable: true,
};

pub async fn slow_upstream(name: String) -> Report {
    let opts = Options {
        upstream_timeout: UPSTREAM_TIMEOUT.into(),
        extra: UPSTREAM_DEADLINE.into(),
        ..Options::default()
    };
    let mut stack = Stack::start(opts).await;
    let mut w = Workload::new(&name, vec![stack.front()]);
    w.duration = Duration::from_secs(5);
    w.workers = 16;
    w.dup_ratio = 1.0;
    w.shared_ratio = 0.0; // one tenant per key: one execution per key is the promise
    w.retry_after_cap = Some(RETRY_AFTER_CAP);
    w.key_deadline = CLIENT_BOUND;
    w.shape = Arc::new(|_| {
        (
            format!("?latency_ms={LATENCY_MS}&detach=true"),
            KeyClass::Late,
        )
    });
    let mut run = start(w);
    let plans = run.plans().await;
    // The upstream calls still running (detached from a gateway that gave up on them)
    // act before the ledger is read.
    tokio::time::sleep(Duration::from_millis(LATENCY_MS + 500)).await;
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let ledger = stack.ledger().await;
    let per_key: Vec<u64> = plans
        .iter()
        .map(|p| ledger.keys.get(&p.key).copied().unwrap_or(0))
        .collect();
    report.notes.push(format!(
        "executions per key: max {}, keys run more than once {}",
        per_key.iter().max().unwrap_or(&0),
        per_key.iter().filter(|&&n| n > 1).count()
    ));
    let answers = final_answers(&run.rec.all(), &plans);
    judge(&mut report, &answers);
    report
}

/// How the clients of one (tenant, key) ended during the load.
#[derive(Debug, Default, PartialEq, Eq)]
struct Ends {
    /// The upstream's 201 for this key, replayed.
    replayed: usize,
    /// The upstream's 201 for this key, as the first execution's own answer.
    first: usize,
    /// Another answer no client retries (a 4xx, a replay of something else).
    wrong: usize,
}

impl Ends {
    /// Clients that stopped at their bound still retrying (504, 409, errors).
    fn gave_up(&self) -> usize {
        SENDERS.saturating_sub(self.replayed + self.first + self.wrong)
    }

    fn answered(&self) -> bool {
        self.wrong == 0 && self.gave_up() == 0
    }
}

/// Each (tenant, key)'s clients' last answers in the load phase. A client stops at the
/// first answer it does not retry, so those answers are one per client that stopped
/// answered; the others reached their bound.
fn final_answers(all: &[Exchange], plans: &[Plan]) -> BTreeMap<(usize, String), Ends> {
    let mut ends: BTreeMap<(usize, String), Ends> = (plans.iter())
        .flat_map(|p| p.reqs.iter())
        .map(|r| ((r.tenant, r.key.clone()), Ends::default()))
        .collect();
    for e in all.iter().filter(|e| e.phase == Phase::Load) {
        let Got::Resp(r) = &e.got else { continue };
        if crate::driver::retryable(&e.got) {
            continue;
        }
        let Some(end) = ends.get_mut(&(e.req.tenant, e.req.key.clone())) else {
            continue;
        };
        let real = r.status == 201 && r.execution().is_some_and(|(_, k)| k == e.req.key);
        match (real, r.is_replay()) {
            (true, true) => end.replayed += 1,
            (true, false) => end.first += 1,
            (false, _) => end.wrong += 1,
        }
    }
    ends
}

/// Counts the clients' ends into the row: a (tenant, key) whose clients did not all
/// get the upstream's real answer is lost, and fails the row.
fn judge(report: &mut Report, answers: &BTreeMap<(usize, String), Ends>) {
    let sum = |f: fn(&Ends) -> usize| answers.values().map(f).sum::<usize>();
    let unanswered: Vec<String> = (answers.iter())
        .filter(|(_, e)| !e.answered())
        .map(|((tenant, key), e)| format!("tenant-{tenant} key {key}: {e:?}"))
        .collect();
    report.lost += unanswered.len();
    report.notes.push(format!(
        "clients' final answers: upstream's 201 replayed {}, first {}, other {}, gave up {}",
        sum(|e| e.replayed),
        sum(|e| e.first),
        sum(|e| e.wrong),
        sum(Ends::gave_up)
    ));
    if !unanswered.is_empty() {
        let some: Vec<&String> = unanswered.iter().take(5).collect();
        report.fail(format!(
            "{} (tenant, key)s whose clients did not all get the upstream's answer within {}s: {some:?}",
            unanswered.len(),
            CLIENT_BOUND.as_secs()
        ));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::driver::{Req, Resp};

    fn req() -> Arc<Req> {
        Arc::new(Req {
            tenant: 1,
            key: "k".into(),
            path: "/v1/payments?latency_ms=1500&detach=true".into(),
            body: String::new(),
        })
    }

    fn got(status: u16, replayed: bool, key: &str) -> Got {
        Got::Resp(Resp {
            status,
            replayed: replayed.then(|| "true".to_string()),
            headers: Vec::new(),
            body: Bytes::from(format!("{{\"execution\":7,\"idempotency_key\":\"{key}\"}}")),
        })
    }

    fn load(answers: Vec<Got>, class: KeyClass) -> (Vec<Exchange>, Vec<Plan>) {
        let r = req();
        let all: Vec<Exchange> = (answers.into_iter())
            .map(|got| Exchange {
                req: r.clone(),
                phase: Phase::Load,
                sent_ms: 0,
                done_ms: 0,
                got,
            })
            .collect();
        let plans = vec![Plan {
            key: "k".into(),
            class,
            reqs: vec![r],
        }];
        (all, plans)
    }

    fn ends_of(answers: Vec<Got>) -> Ends {
        let (all, plans) = load(answers, KeyClass::Late);
        let mut answers = final_answers(&all, &plans);
        answers.remove(&(1, "k".to_string())).unwrap()
    }

    #[test]
    fn a_late_key_is_acknowledged_by_its_first_replay() {
        let answers = || vec![got(504, false, "k"), got(201, true, "k")];
        let (all, plans) = load(answers(), KeyClass::Late);
        assert_eq!(crate::checker::acknowledged(&all, &plans).len(), 1);
        let (all, plans) = load(answers(), KeyClass::Normal);
        assert!(crate::checker::acknowledged(&all, &plans).is_empty());
    }

    #[test]
    fn three_clients_replayed_the_upstreams_answer_are_answered() {
        let ends = ends_of(vec![
            got(504, false, "k"),
            got(409, false, "k"),
            got(201, true, "k"),
            got(201, true, "k"),
            got(201, true, "k"),
        ]);
        assert_eq!(ends.replayed, 3);
        assert!(ends.answered());
    }

    #[test]
    fn a_client_left_retrying_or_answered_otherwise_is_lost() {
        let ends = ends_of(vec![got(504, false, "k"), got(201, true, "k")]);
        assert_eq!(ends.gave_up(), 2);
        assert!(!ends.answered());
        let ends = ends_of(vec![
            got(201, true, "k"),
            got(201, true, "k"),
            got(201, true, "other"),
        ]);
        assert_eq!(ends.wrong, 1);
        assert!(!ends.answered());
    }
}
