//! Claims that clients abandon while Redis holds writes: their leases must be released
//! once the claims land, not stranded for the whole `lock_ttl`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{is_409, keyed, ms, plan_of, EXACTLY_ONCE};
use crate::checker::Report;
use crate::cluster::{Durability, Options, Stack};
use crate::driver::{self, Exchange, Got, Phase, Req, Workload};
use crate::harness::{finish, start, Running};

/// How long Redis holds writes (`CLIENT PAUSE ... WRITE`) in [`slow_claim_timeouts`]:
/// longer than the clients' patience, shorter than the gateway's command timeout.
const PAUSE_MS: u64 = 1500;
/// The clients' timeout during the pause.
const IMPATIENT: Duration = Duration::from_millis(300);
/// After the pause, what it takes for the claims it held back to land and for their
/// abandoned leases to be released: a 409 for a request sent later is a stranded lease.
const SETTLE_MS: u64 = 500;

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
    let pause_end = pause_redis_writes(&stack, &run);

    let victims: Vec<Arc<Req>> = (0..40).map(|i| keyed(&name, "victim", i, 20)).collect();
    send_impatiently(&run, &victims, &targets, pause_end).await;
    let mut plans = run.plans().await;
    plans.extend(plan_of(&victims));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;

    let all = run.rec.all();
    let seen = abandoned(&all, &victims, pause_end);
    verdict(&mut report, &stack, &victims, &seen, pause_end);
    report
}

/// Redis holds writes for [`PAUSE_MS`] from now; when the pause ends (ms of the run).
fn pause_redis_writes(stack: &Stack, run: &Running) -> u64 {
    let paused = stack
        .redis
        .cli(&["CLIENT", "PAUSE", &PAUSE_MS.to_string(), "WRITE"]);
    let pause_at = ms(&run.rec);
    let pause_end = pause_at + PAUSE_MS;
    assert_eq!(paused.trim(), "OK", "CLIENT PAUSE: {paused}");
    pause_end
}

/// Each of `victims` sent by its own client, spread over the first 600 ms of the pause:
/// impatient until `pause_end`, retrying every 100-200 ms until it gets an answer.
async fn send_impatiently(run: &Running, victims: &[Arc<Req>], targets: &[String], pause_end: u64) {
    let clients: Vec<_> = victims
        .iter()
        .enumerate()
        .map(|(i, req)| {
            let (rec, http, req, targets) = (
                run.rec.clone(),
                run.http.clone(),
                req.clone(),
                targets.to_vec(),
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
}

/// What the victims' attempts during the load showed.
struct Abandoned<'a> {
    /// Attempts that gave up during the pause, and the keys that had one.
    gave_up: usize,
    abandoned_keys: usize,
    /// 409s sent within the pause and [`SETTLE_MS`] after it; those sent later.
    in_pause_409: usize,
    late: Vec<&'a Exchange>,
    /// The keys that never got an answer.
    unanswered: Vec<&'a str>,
}

/// The victims' attempts of the load among `all`, counted against `pause_end`.
fn abandoned<'a>(all: &'a [Exchange], victims: &'a [Arc<Req>], pause_end: u64) -> Abandoned<'a> {
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
    let late: Vec<&Exchange> = mine
        .iter()
        .copied()
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
    Abandoned {
        gave_up,
        abandoned_keys,
        in_pause_409,
        late,
        unanswered,
    }
}

/// Notes what `seen` counted and the released leases; fails `report` when too few
/// attempts gave up, a lease outlived its client, or a key got no answer.
fn verdict(
    report: &mut Report,
    stack: &Stack,
    victims: &[Arc<Req>],
    seen: &Abandoned,
    pause_end: u64,
) {
    let (gave_up, abandoned_keys, in_pause_409) =
        (seen.gave_up, seen.abandoned_keys, seen.in_pause_409);
    let (late, unanswered) = (&seen.late, &seen.unanswered);
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
}
