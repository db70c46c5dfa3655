//! Faults of the gateway's replicas: SIGKILL and SIGTERM with calls in flight, and a
//! replica cut off from its dependencies (SIGSTOP has its own file, [`super::sigstop`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{expect_for, in_flight_heavy, options, EXACTLY_ONCE};
use crate::checker::Report;
use crate::cluster::{Durability, Options, Probe, Stack};
use crate::driver::{self, Exchange, Got, KeyClass, Phase, Plan, Req, Workload};
use crate::faultproxy::Fault;
use crate::harness::{finish, start, Running};

/// Load through the front with upstream calls of 200-600 ms, run for 3 s, so that a
/// replica fault lands on calls in flight. Returns the run and replica 1's calls in
/// flight at that moment (-1 if unknown).
async fn calls_in_flight(stack: &Stack, name: &str) -> (Running, f64) {
    let mut w = Workload::new(name, vec![stack.front()]);
    w.shape = Arc::new(|n| {
        (
            format!("?latency_ms={}", 200 + n % 5 * 100),
            KeyClass::Normal,
        )
    });
    w.workers = 30;
    let run = start(w);
    run.at(3000).await;
    let in_flight = stack.replicas[1]
        .metric(&stack.http, "idemgate_in_flight")
        .await
        .unwrap_or(-1.0);
    (run, in_flight)
}

/// A replica killed with SIGKILL while holding leases (upstream calls of 200-600 ms),
/// started again 3 s later. Its leases must hold until they run out (nothing extends
/// them after the kill), so every key runs once, except a key whose upstream call acted
/// just before the kill without its response being stored: that one may run again once
/// its lease is gone ([`cut_at_the_kill`]; a takeover, by design).
pub async fn replica_sigkill(name: String, d: Durability) -> Report {
    let opts = options(d);
    let lease = humantime::parse_duration(&opts.lock_ttl).expect("lock_ttl");
    let mut stack = Stack::start(opts).await;
    let (mut run, in_flight) = calls_in_flight(&stack, &name).await;
    let kill_ms = run.rec.start.elapsed().as_millis() as u64;
    stack.replicas[1].kill();
    run.at(6000).await;
    stack.replicas[1].start();
    let mut plans = run.plans().await;
    let cut = cut_at_the_kill(&run.rec.all(), &plans, kill_ms, lease);
    for plan in plans.iter_mut().filter(|p| cut.contains(&p.key)) {
        plan.class = KeyClass::Takeover;
    }
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    report.notes.push(format!(
        "victim held ~{in_flight} upstream calls; keys cut at the kill and first answered only \
         after their lease {}",
        cut.len()
    ));
    report
}

/// Keys of one tenant that the killed replica was serving and that ran again only once
/// its lease was surely gone. An exchange sent before the kill (`kill_ms`) ended in a
/// connection error within a second after it (`done_ms`, by when the victim was dead).
/// If the victim's upstream call acted, it did before the victim died (the demo upstream
/// acts `latency_ms` after the call arrives, and drops a call whose connection closed),
/// so the victim claimed the key no later than `done_ms - latency_ms`, and its lease
/// ended `lease` after that, or `lease` after `done_ms` when a heartbeat (every third of
/// `lease` from the call's start) could have been due before the kill. The key counts as
/// a takeover when it got at least one first-execution 2xx and each was sent at least
/// 50 ms after that end; a key run again sooner keeps its class, and its second
/// execution is a duplicate.
fn cut_at_the_kill(
    all: &[Exchange],
    plans: &[Plan],
    kill_ms: u64,
    lease: Duration,
) -> HashSet<String> {
    let lease_ms = lease.as_millis() as u64;
    let one_tenant = |key: &str| plans.iter().any(|p| p.key == key && p.reqs.len() == 1);
    let latency = |e: &Exchange| {
        (e.req.path.split("latency_ms=").nth(1))
            .and_then(|v| v.split('&').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let cut = all.iter().filter(|e| {
        e.phase == Phase::Load
            && matches!(e.got, Got::Error(_))
            && e.sent_ms <= kill_ms
            && (kill_ms..=kill_ms + 1000).contains(&e.done_ms)
            && one_tenant(&e.req.key)
    });
    cut.filter(|c| {
        let heartbeat_due = c.sent_ms + lease_ms / 3 <= c.done_ms;
        let claimed_by = if heartbeat_due {
            c.done_ms
        } else {
            c.done_ms.saturating_sub(latency(c))
        };
        let lease_end = claimed_by + lease_ms;
        let firsts: Vec<&Exchange> = (all.iter())
            .filter(|e| e.req.key == c.req.key)
            .filter(|e| matches!(&e.got, Got::Resp(r) if (200..300).contains(&r.status) && !r.is_replay()))
            .collect();
        !firsts.is_empty() && firsts.iter().all(|e| e.sent_ms >= lease_end + 50)
    })
    .map(|c| c.req.key.clone())
    .collect()
}

/// A replica stopped with SIGTERM mid-load: it must drain its in-flight calls within
/// `shutdown_grace` and exit; started again afterwards.
pub async fn replica_sigterm(name: String) -> Report {
    let mut stack = Stack::start(Options::default()).await;
    let (mut run, in_flight) = calls_in_flight(&stack, &name).await;
    let t = Instant::now();
    stack.replicas[1].signal("TERM");
    let mut exited = None;
    while t.elapsed() < Duration::from_secs(8) {
        if !stack.replicas[1].running() {
            exited = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.at(7000).await;
    if exited.is_some() {
        stack.replicas[1].start();
    }
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let log = stack.replicas[1].log_text();
    match exited {
        Some(d) => report.notes.push(format!(
            "victim had ~{in_flight} calls in flight, drained and exited in {} ms",
            d.as_millis()
        )),
        None => report.fail("the SIGTERMed replica did not exit within 8 s"),
    }
    if !log.contains("shutting down") || !log.contains("stopped") {
        report.fail("the SIGTERMed replica did not log a graceful shutdown");
    }
    if log.contains("upstream calls still running after shutdown_grace") {
        report.fail("the SIGTERMed replica abandoned upstream calls");
    }
    report
}

/// One replica cut off from Redis through the fault proxy: latency 500 ms (past the
/// 300 ms command timeout) for 2 s, black hole for 2 s, resets for 1.5 s, then healed.
pub async fn replica_cut_off(name: String, d: Durability) -> Report {
    let mut opts = options(d);
    opts.via_fault_proxy = vec![0];
    let mut stack = Stack::start(opts).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    let fault = stack.fault.as_ref().unwrap();
    run.at(2000).await;
    fault.set(Fault::Latency(Duration::from_millis(500)));
    run.at(4000).await;
    fault.set(Fault::BlackHole);
    run.at(6000).await;
    fault.set(Fault::Reset);
    run.at(7500).await;
    fault.set(Fault::Pass);
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    let fallbacks = stack.replicas[0]
        .metric(&stack.http, "idemgate_fallback_total")
        .await
        .unwrap_or(-1.0);
    report.notes.push(format!(
        "cut-off replica: breaker trips {}, fallbacks {fallbacks}",
        stack.replicas[0]
            .log_text()
            .matches("redis failing: claims follow")
            .count()
    ));
    report
}

#[cfg(test)]
mod cut_at_the_kill_tests {
    use bytes::Bytes;

    use super::*;

    const LEASE: Duration = Duration::from_secs(3);
    const KILL_MS: u64 = 3005;

    fn req(key: &str) -> Arc<Req> {
        Arc::new(Req {
            tenant: 2,
            key: key.into(),
            path: "/v1/payments?latency_ms=400".into(),
            body: String::new(),
        })
    }

    fn answer(status: u16, replayed: bool) -> Got {
        Got::Resp(driver::Resp {
            status,
            replayed: replayed.then(|| "true".to_string()),
            headers: Vec::new(),
            body: Bytes::new(),
        })
    }

    fn at(req: &Arc<Req>, sent_ms: u64, done_ms: u64, got: Got) -> Exchange {
        Exchange {
            req: req.clone(),
            phase: Phase::Load,
            sent_ms,
            done_ms,
            got,
        }
    }

    /// The failing run's key: sent to the victim at 2,601 ms (upstream 400 ms), cut at
    /// the kill, 409s until its lease ran out, then run again by a retry.
    fn timeline(retry_sent_ms: u64, cut_sent_ms: u64) -> (Vec<Exchange>, Vec<Plan>) {
        let r = req("k");
        let all = vec![
            at(
                &r,
                cut_sent_ms,
                3008,
                Got::Error("connection closed".into()),
            ),
            at(&r, 3066, 3070, answer(409, false)),
            at(&r, retry_sent_ms, retry_sent_ms + 404, answer(201, false)),
            at(&r, 8682, 8684, answer(201, true)),
        ];
        let plans = vec![Plan {
            key: "k".into(),
            class: KeyClass::Normal,
            reqs: vec![r],
        }];
        (all, plans)
    }

    #[test]
    fn a_key_run_again_after_its_lease_is_a_takeover() {
        let (all, plans) = timeline(5772, 2601);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).contains("k"));
    }

    #[test]
    fn a_key_run_again_while_its_lease_may_hold_stays_a_duplicate() {
        // Before claim + lease (2,608 + 3,000) plus the margin.
        let (all, plans) = timeline(5600, 2601);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
        // Sent 1.5 s before the kill: a heartbeat may have extended the lease to the
        // kill plus `lease`.
        let (all, plans) = timeline(5772, 1500);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
    }

    #[test]
    fn replays_alone_or_another_tenant_do_not_make_a_takeover() {
        let (mut all, plans) = timeline(5772, 2601);
        all.remove(2);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
        let (all, mut plans) = timeline(5772, 2601);
        plans[0].reqs.push(req("k"));
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
    }
}
