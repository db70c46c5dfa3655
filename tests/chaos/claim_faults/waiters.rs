//! Duplicates that hang up while waiting for a hot key's holder: they must leave the
//! key's waiters, so patient duplicates after them still get to wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::{is_409, keyed, plan_of, EXACTLY_ONCE};
use crate::checker::Report;
use crate::cluster::{config_accepted, Options, Stack};
use crate::driver::{self, Got, KeyClass, Phase, Req, Workload};
use crate::harness::{finish, start, Running};

/// Every waiters set (`<prefix>:{<record>}:ws`) in Redis and their members, counted in
/// one script (one step, and fast enough to run mid-scenario): (sets, members).
fn waiters_left(stack: &Stack) -> (u64, u64) {
    const COUNT: &str = "local s, n = 0, 0 \
        for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
        s = s + 1; n = n + redis.call('ZCARD', k) end return {s, n}";
    let out = stack.redis.cli(&["EVAL", COUNT, "0", "idemgate:*:ws"]);
    let v: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(v.len(), 2, "counting the waiters sets: {out}");
    (v[0], v[1])
}

const MAX_WAITERS: usize = 4;
const HOT_KEYS: usize = 3;
const IMPATIENT_PER_KEY: usize = 12;
const PATIENT_PER_KEY: usize = 2;
/// The hot keys' upstream call.
const HOLDER_MS: u64 = 2500;

/// Impatient waiters on hot keys (`in_flight = "wait"`, `max_waiters = 4`,
/// `wait_timeout` 5 s). First, 4 s of load where every key is sent by three concurrent
/// clients (two of them wait) and 40% of attempts hang up after 150 ms. Then three hot
/// keys whose upstream call takes 2.5 s: 12 duplicates each, one every 100 ms, hanging
/// up after 150 ms (never more than two waiting at once), then two patient duplicates
/// that must wait and get the replay, not an instant 409 (before the fix, the hung-up
/// waiters kept their places and the key reached `max_waiters`). Afterwards every
/// waiters set in Redis must be empty.
pub async fn impatient_waiters(name: String) -> Report {
    let opts = Options {
        idempotency: format!(
            "in_flight = \"wait\"\nwait_timeout = \"5s\"\nmax_waiters = {MAX_WAITERS}"
        ),
        upstream_timeout: "5s".into(),
        abort_on_close: true,
        ..Options::default()
    };
    if let Err(e) = config_accepted(&opts) {
        let mut r = Report {
            scenario: name,
            ..Default::default()
        };
        r.notes
            .push("not run: in_flight = \"wait\" not supported".into());
        r.fail(e);
        return r;
    }
    let mut stack = Stack::start(opts).await;
    let mut targets = vec![stack.front()];
    targets.extend(stack.replica_urls());
    let mut w = Workload::new(&name, targets.clone());
    w.duration = Duration::from_secs(4);
    w.workers = 12;
    w.dup_ratio = 1.0;
    w.disconnect = Some((0.4, Duration::from_millis(150)));
    w.shape = Arc::new(|n| {
        (
            format!("?latency_ms={}", 300 + n % 4 * 100),
            KeyClass::Normal,
        )
    });
    let mut run = start(w);
    let mut plans = run.plans().await;
    let background = waiters_left(&stack);

    // The hot keys, all at once.
    let hot: Vec<Arc<Req>> = (0..HOT_KEYS)
        .map(|i| keyed(&name, "hot", i, HOLDER_MS))
        .collect();
    let t0 = Instant::now();
    let holders: Vec<_> = hot
        .iter()
        .map(|req| send(&run, req, &targets[0], Duration::from_secs(10), true))
        .collect();
    hang_up_while_waiting(&run, &hot, &targets, t0).await;
    at(t0, 1700).await;
    let before_patient = waiters_left(&stack);
    let patient_sent_ms = t0.elapsed().as_millis() as u64;
    let (waited, refused) = wait_patiently(&run, &hot, &targets).await;
    for h in holders {
        let _ = h.await;
    }
    // The last waiters leave in tasks of their own: give them a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = waiters_left(&stack);

    plans.extend(plan_of(&hot));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let waiters = Waiters {
        background,
        before_patient,
        after,
    };
    let patient = Patient {
        sent_ms: patient_sent_ms,
        waited,
        refused,
    };
    verdict(&mut report, &run, &hot, &waiters, &patient);
    report
}

/// Sleeps until `ms` after `t0`.
fn at(t0: Instant, ms: u64) -> tokio::time::Sleep {
    tokio::time::sleep_until((t0 + Duration::from_millis(ms)).into())
}

/// Sends `req` to `target` in a task of its own, with `retry` again every 200 ms while
/// the answer is retryable (within the run's first minute); the task gives the first
/// answer.
fn send(
    run: &Running,
    req: &Arc<Req>,
    target: &str,
    timeout: Duration,
    retry: bool,
) -> JoinHandle<Got> {
    let (rec, http, req, target) = (
        run.rec.clone(),
        run.http.clone(),
        req.clone(),
        target.to_string(),
    );
    tokio::spawn(async move {
        let first = rec.send(&http, &target, &req, timeout, Phase::Load).await;
        let mut got = first.clone();
        while retry && driver::retryable(&got) && rec.start.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            got = rec.send(&http, &target, &req, timeout, Phase::Load).await;
        }
        first
    })
}

/// [`IMPATIENT_PER_KEY`] duplicates of each hot key, one every 100 ms from 200 ms after
/// `t0`, each hanging up after 150 ms; returns once all of them have.
async fn hang_up_while_waiting(run: &Running, hot: &[Arc<Req>], targets: &[String], t0: Instant) {
    let mut impatient = Vec::new();
    for i in 0..IMPATIENT_PER_KEY {
        at(t0, 200 + i as u64 * 100).await;
        for (k, req) in hot.iter().enumerate() {
            let target = &targets[(i + k) % targets.len()];
            impatient.push(send(run, req, target, Duration::from_millis(150), false));
        }
    }
    for h in impatient {
        let _ = h.await;
    }
}

/// [`PATIENT_PER_KEY`] duplicates of each hot key that wait: how many got the replay,
/// and what the others got.
async fn wait_patiently(
    run: &Running,
    hot: &[Arc<Req>],
    targets: &[String],
) -> (usize, Vec<String>) {
    let mut patient = Vec::new();
    for j in 0..PATIENT_PER_KEY {
        for (k, req) in hot.iter().enumerate() {
            let target = &targets[(1 + j + k) % targets.len()];
            patient.push((
                req.key.clone(),
                send(run, req, target, Duration::from_secs(10), true),
            ));
        }
    }
    let mut refused = Vec::new();
    let mut waited = 0;
    for (key, h) in patient {
        match h.await.unwrap() {
            Got::Resp(r) if r.is_replay() => waited += 1,
            got => refused.push(format!(
                "{key}: {}",
                match got {
                    Got::Resp(r) =>
                        format!("{} {}", r.status, r.problem_code().unwrap_or_default()),
                    other => format!("{other:?}"),
                }
            )),
        }
    }
    (waited, refused)
}

/// The waiters sets in Redis, as (sets, members): after the load, before the patient
/// duplicates, and once every client was done.
struct Waiters {
    background: (u64, u64),
    before_patient: (u64, u64),
    after: (u64, u64),
}

/// The patient duplicates: when they were sent (ms after the holders), how many waited
/// for the replay, and what the others got.
struct Patient {
    sent_ms: u64,
    waited: usize,
    refused: Vec<String>,
}

/// Notes the waiters sets and the hot keys' answers; fails `report` when too few
/// duplicates hung up or the patient ones came too late (the scenario proved nothing),
/// a patient duplicate did not get to wait, or waiters were left behind.
fn verdict(report: &mut Report, run: &Running, hot: &[Arc<Req>], w: &Waiters, p: &Patient) {
    let (background, before_patient, after) = (w.background, w.before_patient, w.after);
    let (patient_sent_ms, waited, refused) = (p.sent_ms, p.waited, &p.refused);
    let all = run.rec.all();
    let hot_timeouts = all
        .iter()
        .filter(|e| hot.iter().any(|h| Arc::ptr_eq(h, &e.req)))
        .filter(|e| matches!(e.got, Got::Timeout))
        .count();
    let hot_409 = all
        .iter()
        .filter(|e| hot.iter().any(|h| Arc::ptr_eq(h, &e.req)) && is_409(e))
        .count();
    report.notes.push(format!(
        "waiters after the load {}/{}, before the patient duplicates {}/{}, at the end {}/{} \
         (sets/members); hot keys: {hot_timeouts} hang-ups, {hot_409} 409s, {waited}/{} \
         patient duplicates waited for the replay",
        background.0,
        background.1,
        before_patient.0,
        before_patient.1,
        after.0,
        after.1,
        HOT_KEYS * PATIENT_PER_KEY
    ));
    report.details.push(format!(
        "patient duplicates sent {patient_sent_ms} ms after the holders"
    ));
    // Enough hang-ups per key to fill its waiters if they kept their places, and the
    // patient duplicates sent while the holders still ran (else they prove nothing).
    if hot_timeouts < HOT_KEYS * MAX_WAITERS {
        report.fail(format!(
            "only {hot_timeouts} impatient duplicates hung up while waiting: the scenario \
             did not exercise waiters leaving"
        ));
    }
    if patient_sent_ms > HOLDER_MS - 500 {
        report.fail(format!(
            "the patient duplicates were sent {patient_sent_ms} ms after the holders, too \
             late to have to wait: the scenario did not exercise them"
        ));
    }
    if !refused.is_empty() {
        report.fail(format!(
            "{} of {} patient duplicates did not get to wait (with {} members in the \
             waiters sets, max_waiters {MAX_WAITERS} per key), e.g. {}",
            refused.len(),
            HOT_KEYS * PATIENT_PER_KEY,
            before_patient.1,
            refused[0]
        ));
    }
    if after.1 > 0 || after.0 > 0 {
        report.fail(format!(
            "waiters left behind: {} members in {} sets once every client was done",
            after.1, after.0
        ));
    }
}
