//! Callers that give up on the claim path: a claim that the
//! client abandons while Redis is slow must not strand its lease, and duplicates that
//! hang up while waiting for the holder must leave the key's waiters.
//!
//! Both scenarios run HAProxy with `option abortonclose`, so that a client hanging up
//! on the front aborts its request on the replica too, and also send to the replicas
//! directly: the gateway sees every hang-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checker::{Expect, Report};
use crate::cluster::{config_accepted, Durability, Options, Stack};
use crate::driver::{self, Exchange, Got, KeyClass, Phase, Plan, Recorder, Req, Workload};
use crate::harness::{finish, start};

const EXACTLY_ONCE: Expect = Expect {
    exactly_once: true,
    durable: true,
};

/// How long Redis holds writes (`CLIENT PAUSE ... WRITE`) in [`slow_claim_timeouts`]:
/// longer than the clients' patience, shorter than the gateway's command timeout.
const PAUSE_MS: u64 = 1500;
/// The clients' timeout during the pause.
const IMPATIENT: Duration = Duration::from_millis(300);
/// After the pause, what it takes for the claims it held back to land and for their
/// abandoned leases to be released: a 409 for a request sent later is a stranded lease.
const SETTLE_MS: u64 = 500;

fn slug(name: &str) -> String {
    name.replace(['[', ']', '=', ' ', ','], "_")
}

fn keyed(name: &str, what: &str, i: usize, latency_ms: u64) -> Arc<Req> {
    Arc::new(Req {
        tenant: i % 3,
        key: format!("{}-{what}-{i}-t{}", slug(name), i % 3),
        path: format!("/v1/payments?latency_ms={latency_ms}"),
        body: format!("{{\"amount\":{i},\"currency\":\"eur\"}}"),
    })
}

fn plan_of(reqs: &[Arc<Req>]) -> Vec<Plan> {
    reqs.iter()
        .map(|r| Plan {
            key: r.key.clone(),
            class: KeyClass::Normal,
            reqs: vec![r.clone()],
        })
        .collect()
}

fn ms(rec: &Recorder) -> u64 {
    rec.start.elapsed().as_millis() as u64
}

fn is_409(e: &Exchange) -> bool {
    matches!(&e.got, Got::Resp(r) if r.status == 409)
}

/// Clients time out during a slow claim, then retry (Redis-only mode,
/// `lock_ttl` 10 s, `redis.command_timeout` 2 s). Background load through the front and
/// the replicas loads the Lua scripts; at 2 s Redis holds writes for 1.5 s
/// (`CLIENT PAUSE 1500 WRITE`), and 40 keys are sent during the pause by clients that
/// give up after 300 ms and retry every 100-200 ms until they get an answer. The claims
/// they abandoned land when the pause ends and must be released: a retry sent more
/// than 500 ms after the pause must never get 409 (before the fix, the lease stayed
/// for the whole `lock_ttl`).
pub async fn slow_claim_timeouts(name: String) -> Report {
    let opts = Options {
        durability: Durability::RedisOnly,
        command_timeout: "2s".into(),
        lock_ttl: "10s".into(),
        abort_on_close: true,
        ..Options::default()
    };
    let mut stack = Stack::start(opts).await;
    let mut targets = vec![stack.front()];
    targets.extend(stack.replica_urls());
    let mut w = Workload::new(&name, targets.clone());
    w.duration = Duration::from_secs(6);
    w.workers = 8;
    let mut run = start(w);
    run.at(2000).await;
    let paused = stack
        .redis
        .cli(&["CLIENT", "PAUSE", &PAUSE_MS.to_string(), "WRITE"]);
    let pause_at = ms(&run.rec);
    let pause_end = pause_at + PAUSE_MS;
    assert_eq!(paused.trim(), "OK", "CLIENT PAUSE: {paused}");

    let victims: Vec<Arc<Req>> = (0..40).map(|i| keyed(&name, "victim", i, 20)).collect();
    let clients: Vec<_> = victims
        .iter()
        .enumerate()
        .map(|(i, req)| {
            let (rec, http, req, targets) = (
                run.rec.clone(),
                run.http.clone(),
                req.clone(),
                targets.clone(),
            );
            tokio::spawn(async move {
                // Spread over the first 600 ms of the pause.
                tokio::time::sleep(Duration::from_millis(i as u64 * 15)).await;
                let first = Instant::now();
                for attempt in 0..100 {
                    let target = &targets[(i + attempt) % targets.len()];
                    // Impatient while Redis is slow; a retry after it waits as usual.
                    let timeout = if ms(&rec) < pause_end {
                        IMPATIENT
                    } else {
                        Duration::from_secs(3)
                    };
                    let got = rec.send(&http, target, &req, timeout, Phase::Load).await;
                    if !driver::retryable(&got) || first.elapsed() > Duration::from_secs(15) {
                        return;
                    }
                    let backoff = 100 + rand::random::<u64>() % 100;
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                }
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
    let mut plans = run.plans().await;
    plans.extend(plan_of(&victims));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;

    let all = run.rec.all();
    let mine: Vec<&Exchange> = all
        .iter()
        .filter(|e| e.phase == Phase::Load && victims.iter().any(|v| Arc::ptr_eq(v, &e.req)))
        .collect();
    let gave_up = mine
        .iter()
        .filter(|e| matches!(e.got, Got::Timeout) && e.sent_ms < pause_end)
        .count();
    let abandoned_keys = victims
        .iter()
        .filter(|v| {
            mine.iter().any(|e| {
                Arc::ptr_eq(v, &e.req) && matches!(e.got, Got::Timeout) && e.sent_ms < pause_end
            })
        })
        .count();
    let in_pause_409 = mine
        .iter()
        .filter(|e| is_409(e) && e.sent_ms < pause_end + SETTLE_MS)
        .count();
    let late: Vec<&&Exchange> = mine
        .iter()
        .filter(|e| is_409(e) && e.sent_ms >= pause_end + SETTLE_MS)
        .collect();
    let unanswered: Vec<&str> = victims
        .iter()
        .filter(|v| {
            !mine.iter().any(|e| {
                Arc::ptr_eq(v, &e.req)
                    && matches!(&e.got, Got::Resp(r) if r.is_replay() || (200..300).contains(&r.status))
            })
        })
        .map(|v| v.key.as_str())
        .collect();
    let released = stack
        .logs()
        .matches("lease dropped unsettled; releasing it")
        .count();
    let last_late = late.iter().map(|e| e.sent_ms).max();
    report.notes.push(format!(
        "{} keys sent during the pause: {gave_up} attempts gave up ({abandoned_keys} keys), \
         abandoned leases released {released}, 409s within the pause + {SETTLE_MS} ms \
         {in_pause_409}, after it {}",
        victims.len(),
        late.len()
    ));
    if abandoned_keys < victims.len() / 2 {
        report.fail(format!(
            "only {abandoned_keys} of {} keys had an attempt give up during the pause: \
             the scenario did not exercise abandoned claims",
            victims.len()
        ));
    }
    if let Some(last) = last_late {
        let keys: Vec<&str> = (late.iter().map(|e| e.req.key.as_str()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        report.fail(format!(
            "{} retries got 409 after the slow period (the last sent {} ms after the pause \
             ended), on {} keys, e.g. {:?}: a lease outlived the client that abandoned it",
            late.len(),
            last - pause_end,
            keys.len(),
            &keys[..keys.len().min(3)]
        ));
    }
    if !unanswered.is_empty() {
        report.fail(format!(
            "{} keys sent during the pause never got an answer: {:?}",
            unanswered.len(),
            &unanswered[..unanswered.len().min(5)]
        ));
    }
    report
}

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
    let at = |ms: u64| tokio::time::sleep_until((t0 + Duration::from_millis(ms)).into());
    let send = |req: &Arc<Req>, target: &str, timeout: Duration, retry: bool| {
        let (rec, http, req, target) = (
            run.rec.clone(),
            run.http.clone(),
            req.clone(),
            target.to_string(),
        );
        tokio::spawn(async move {
            let first = rec.send(&http, &target, &req, timeout, Phase::Load).await;
            let mut got = first.clone();
            while retry && driver::retryable(&got) && rec.start.elapsed() < Duration::from_secs(60)
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                got = rec.send(&http, &target, &req, timeout, Phase::Load).await;
            }
            first
        })
    };
    let holders: Vec<_> = hot
        .iter()
        .map(|req| send(req, &targets[0], Duration::from_secs(10), true))
        .collect();
    let mut impatient = Vec::new();
    for i in 0..IMPATIENT_PER_KEY {
        at(200 + i as u64 * 100).await;
        for (k, req) in hot.iter().enumerate() {
            let target = &targets[(i + k) % targets.len()];
            impatient.push(send(req, target, Duration::from_millis(150), false));
        }
    }
    for h in impatient {
        let _ = h.await;
    }
    at(1700).await;
    let before_patient = waiters_left(&stack);
    let patient_sent_ms = t0.elapsed().as_millis() as u64;
    let mut patient = Vec::new();
    for j in 0..PATIENT_PER_KEY {
        for (k, req) in hot.iter().enumerate() {
            let target = &targets[(1 + j + k) % targets.len()];
            patient.push((
                req.key.clone(),
                send(req, target, Duration::from_secs(10), true),
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
    for h in holders {
        let _ = h.await;
    }
    // The last waiters leave in tasks of their own: give them a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = waiters_left(&stack);

    plans.extend(plan_of(&hot));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
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
    report
}
