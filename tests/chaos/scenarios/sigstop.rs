//! A replica frozen (SIGSTOP) while it holds leases, and thawed after they ran out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::EXACTLY_ONCE;
use crate::checker::Report;
use crate::cluster::{config_accepted, Durability, Options, Probe, Stack};
use crate::driver::{self, KeyClass, Phase, Plan, Req, Workload};
use crate::harness::{finish, start, Running};

/// How long the fault's steps take: when the replica is frozen after the stale keys were
/// sent, the lease, and how long it stays frozen (ms).
struct Freeze {
    stop_at: u64,
    lock_ms: u64,
    frozen: u64,
}

/// What the freeze left: when the replica was stopped, how long it stayed frozen, and
/// what its own clients got.
struct Frozen {
    stopped: Instant,
    frozen_for: Duration,
    holder_got: Vec<driver::Got>,
}

/// A replica frozen with SIGSTOP past its lease while its upstream calls finish, then
/// SIGCONT: another replica takes the keys over, and the frozen one's late completion
/// must be refused (the stored response, in Redis and in Postgres, is the takeover's).
pub async fn replica_sigstop(name: String, d: Durability) -> Report {
    // The heartbeat lets the upstream call (1.5 s) outlive the lease (1 s); frozen, the
    // replica stops extending it, and resumes 3.5 s later with the answer waiting.
    let (lock, latency, stop_at, frozen) = ("1s", 1500u64, 300u64, 3500u64);
    let opts = Options {
        lock_ttl: lock.into(),
        upstream_timeout: "10s".into(),
        durability: d,
        ..Options::default()
    };
    if let Err(e) = config_accepted(&opts) {
        let mut r = Report {
            scenario: name,
            ..Default::default()
        };
        r.notes
            .push("not run: upstream_timeout > lock_ttl refused (no lease heartbeat)".into());
        r.fail(e);
        return r;
    }
    let lock_ms = humantime::parse_duration(lock).unwrap().as_millis() as u64;
    let mut stack = Stack::start(opts).await;
    // Background load on the two other replicas, directly: only the stale keys below
    // are held by the replica that gets frozen.
    let mut w = Workload::new(&name, stack.replica_urls()[1..].to_vec());
    w.duration = Duration::from_secs(6);
    w.workers = 12;
    let mut run = start(w);
    run.at(1000).await;

    let stale = stale_keys(&name, latency);
    let lost_before = lease_lost(&stack).await;
    let timing = Freeze {
        stop_at,
        lock_ms,
        frozen,
    };
    let fault = freeze_and_take_over(&stack, &run, &stale, timing).await;
    if d.claims_durable() {
        retry_each_once(&stack, &run, &stale).await;
    }
    let mut plans = run.plans().await;
    plans.extend(stale.iter().map(|r| Plan {
        key: r.key.clone(),
        class: KeyClass::Takeover,
        reqs: vec![r.clone()],
    }));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let refused_ok = check_takeovers_stored(&mut report, &run, &stale, d, fault.stopped);
    let refusals = lease_lost(&stack).await - lost_before;
    note_the_frozen_replica(&mut report, &fault, refused_ok, stale.len(), refusals);
    report
}

/// The keys the frozen replica holds: each one's upstream call takes `latency` ms.
fn stale_keys(name: &str, latency: u64) -> Vec<Arc<Req>> {
    (0..6)
        .map(|i| {
            Arc::new(Req {
                tenant: i % 3,
                key: format!(
                    "{}-stale-{i}-t{}",
                    name.replace(['[', ']', '=', ' '], "_"),
                    i % 3
                ),
                path: format!("/v1/payments?latency_ms={latency}"),
                body: format!("{{\"amount\":{i},\"currency\":\"eur\"}}"),
            })
        })
        .collect()
}

/// The first replica's `idemgate_lease_lost_total` (0 when it has none).
async fn lease_lost(stack: &Stack) -> f64 {
    stack.replicas[0]
        .metric(&stack.http, "idemgate_lease_lost_total")
        .await
        .unwrap_or(0.0)
}

/// The fault: `stale` sent to the first replica, which is frozen while it holds them;
/// retries through the front once the lease has expired; thawed, and its own clients'
/// answers awaited.
async fn freeze_and_take_over(
    stack: &Stack,
    run: &Running,
    stale: &[Arc<Req>],
    timing: Freeze,
) -> Frozen {
    let Freeze {
        stop_at,
        lock_ms,
        frozen,
    } = timing;
    let victim = stack.replicas[0].url();
    // The frozen replica's own clients wait for their answers.
    let holders: Vec<_> = stale
        .iter()
        .map(|req| {
            let (rec, http, victim, req) = (
                run.rec.clone(),
                run.http.clone(),
                victim.clone(),
                req.clone(),
            );
            tokio::spawn(async move {
                rec.send(&http, &victim, &req, Duration::from_secs(30), Phase::Load)
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(stop_at)).await;
    stack.replicas[0].signal("STOP");
    let stopped = Instant::now();
    // Retries through the front once the lease has expired: another replica takes over.
    tokio::time::sleep(Duration::from_millis(lock_ms + 200)).await;
    driver::resend_all(
        run.rec.clone(),
        run.http.clone(),
        stack.front(),
        stale.to_vec(),
        Phase::Load,
        Duration::from_secs(10),
        8,
    )
    .await;
    let left = Duration::from_millis(frozen).saturating_sub(stopped.elapsed());
    tokio::time::sleep(left).await;
    stack.replicas[0].signal("CONT");
    let frozen_for = stopped.elapsed();
    let mut holder_got = Vec::new();
    for h in holders {
        holder_got.push(h.await.unwrap());
    }
    Frozen {
        stopped,
        frozen_for,
        holder_got,
    }
}

/// A key answered 502 is not acknowledged, so the harness's final passes skip it: one
/// retry each instead, which must replay the stored outcome.
async fn retry_each_once(stack: &Stack, run: &Running, stale: &[Arc<Req>]) {
    for req in stale {
        (run.rec)
            .send(
                &run.http,
                &stack.front(),
                req,
                Duration::from_secs(10),
                Phase::Final,
            )
            .await;
    }
}

/// Fails `report` for each stale key whose stored response is not the takeover's;
/// returns how many were.
///
/// The stored response of each stale key is the takeover's: the first answer a retry
/// through the front got, replayed by the final passes (Redis, then Postgres). Where
/// a lapsed lease is remembered (durable claims: a Postgres row, or a vouched record
/// that outlives its lease), the takeover runs nothing and stores the unknown outcome
/// (502, `on_ambiguous = "store"`); elsewhere it runs the key (2xx).
fn check_takeovers_stored(
    report: &mut Report,
    run: &Running,
    stale: &[Arc<Req>],
    d: Durability,
    stopped: Instant,
) -> usize {
    let answered = |status: u16| match d.claims_durable() {
        true => status == 502,
        false => (200..300).contains(&status),
    };
    let all = run.rec.all();
    let mut refused_ok = 0;
    for req in stale {
        let mine: Vec<_> = all.iter().filter(|e| Arc::ptr_eq(&e.req, req)).collect();
        let takeover = mine.iter().find_map(|e| match &e.got {
            driver::Got::Resp(r)
                if !r.is_replay()
                    && answered(r.status)
                    && e.phase == Phase::Load
                    && e.sent_ms > stopped.duration_since(run.t0).as_millis() as u64 =>
            {
                Some(r.clone())
            }
            _ => None,
        });
        let Some(takeover) = takeover else {
            report.fail(format!(
                "{}: no takeover execution was acknowledged",
                req.key
            ));
            continue;
        };
        let mut ok = true;
        let passes = match d.claims_durable() {
            true => &[Phase::Final][..],
            false => &[Phase::Final, Phase::Durable],
        };
        for &phase in passes {
            let last = mine.iter().rev().find(|e| e.phase == phase);
            match last.map(|e| &e.got) {
                Some(driver::Got::Resp(r)) if r.is_replay() && r.same_as(&takeover) => {}
                other => {
                    ok = false;
                    report.fail(format!(
                        "{}: {phase:?} pass does not replay the takeover's response: {:?}",
                        req.key,
                        other.map(|g| match g {
                            driver::Got::Resp(r) =>
                                format!("{} exec {:?}", r.status, r.execution()),
                            g => format!("{g:?}"),
                        })
                    ));
                }
            }
        }
        if ok {
            refused_ok += 1;
        }
    }
    refused_ok
}

/// Notes what the frozen replica's clients got and how many late completions it
/// refused (`refusals`); fails `report` when it refused none.
fn note_the_frozen_replica(
    report: &mut Report,
    fault: &Frozen,
    refused_ok: usize,
    stale: usize,
    refusals: f64,
) {
    let holder_got = &fault.holder_got;
    let holder_summary: Vec<String> = holder_got
        .iter()
        .map(|g| match g {
            driver::Got::Resp(r) => format!(
                "{}{}{}",
                r.status,
                if r.is_replay() { " replay" } else { "" },
                r.execution()
                    .map(|(n, _)| format!(" exec#{n}"))
                    .or(r.problem_code().map(|c| format!(" {c}")))
                    .unwrap_or_default()
            ),
            g => format!("{g:?}"),
        })
        .collect();
    let stale_acks = holder_got
        .iter()
        .filter(|g| matches!(g, driver::Got::Resp(r) if !r.is_replay() && (200..300).contains(&r.status)))
        .count();
    report.notes.push(format!(
        "frozen {} ms; stored = takeover's for {refused_ok}/{}; stale completions refused {refusals}",
        fault.frozen_for.as_millis(),
        stale
    ));
    report.details.push(format!(
        "frozen replica's own clients got: {}",
        holder_summary.join(", ")
    ));
    if refusals < 1.0 {
        report.fail(format!(
            "no late completion was refused (lease_lost +{refusals}); the frozen replica's clients got {holder_summary:?}"
        ));
    }
    if stale_acks > 0 {
        report.notes.push(format!(
            "frozen replica answered {stale_acks} of its own clients 2xx with its unstored execution"
        ));
    }
}
