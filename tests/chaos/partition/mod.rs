//! Network partitions, not process deaths. Every part runs in a network
//! namespace of its own on one bridge (the launcher's `NetLab`, [`Options::partitions`]);
//! a scenario cuts links mid-load with nftables, so packets vanish where they arrive (no
//! RST: calls hang until their own timeouts, and both sides go on acting), then heals.
//! HAProxy runs without health checks, so every replica, on either side of the cut,
//! keeps getting its share of keys, concurrent duplicates included.
//!
//! Besides the checker's invariants (executions per key, lost acknowledged responses,
//! keys answered with two different 2xx responses) each row notes how long after the
//! heal every replica took to answer a fresh key with a 2xx again ("claims back"), and
//! counts the keys that two replicas, once healed, answer with different responses (each
//! is asked directly, replay caches included, before the final passes): a failure where
//! the mode promises exactly once, its window (measured) where a key may run twice.

mod rows;

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_fleet::{Host, NetLab};

use crate::checker::Report;
use crate::cluster::{Durability, Options, Stack, Topology};
use crate::driver::{Got, KeyClass, Phase, Plan, Recorder, Req, Workload};
use crate::failover::expect_for;
use crate::harness::{finish, start, Running};

/// The cut starts this long after the load.
const CUT_AT: u64 = 2_000;
/// ... and is healed at this time (promotions, where there are any, happen in between).
const HEAL_AT: u64 = 8_000;
/// A cut healed before the cluster's node timeout (1 s): no promotion.
const SHORT_HEAL_AT: u64 = CUT_AT + 600;

/// The failover scenarios' options (`replica_acks = 1` with a 100 ms
/// `replica_ack_timeout`), every part in a namespace of its own, HAProxy without health
/// checks.
fn options(topology: Topology, d: Durability, replica_acks: bool) -> Options {
    Options {
        partitions: true,
        health_checks: false,
        ..crate::failover::options(topology, d, replica_acks)
    }
}

/// New keys for 14 s (the cut from 2 s to 8 s, then six seconds of keys first sent
/// after the heal), 50-250 ms in the upstream each.
fn workload(name: &str, stack: &Stack) -> Workload {
    let mut w = Workload::new(name, vec![stack.front()]);
    w.duration = Duration::from_secs(14);
    w.shape = Arc::new(|n| (format!("?latency_ms={}", 50 + n % 5 * 50), KeyClass::Normal));
    w
}

/// Runs `body` unless this machine cannot make a network lab; then the row says
/// SKIPPED and why.
pub fn run<F, Fut>(scenario: &str, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Report>,
{
    if let Some(why) = NetLab::unavailable() {
        let report = Report {
            scenario: scenario.to_string(),
            skipped: Some(why.clone()),
            notes: vec![format!("skipped: {why}")],
            ..Default::default()
        };
        crate::report::emit(&report, 0.0);
        return;
    }
    crate::harness::run(scenario, body);
}

fn lab(stack: &Stack) -> &NetLab {
    stack
        .lab
        .as_ref()
        .expect("a partition scenario runs in a lab")
}

/// Cuts `a` from `b` (both ways) now.
fn cut(stack: &Stack, a: &[&Host], b: &[&Host]) {
    tokio::task::block_in_place(|| lab(stack).cut(a, b)).expect("nft cut");
}

fn heal(stack: &Stack) -> Instant {
    tokio::task::block_in_place(|| lab(stack).heal()).expect("nft heal");
    Instant::now()
}

/// After the heal: each replica is sent fresh keys (directly, one at a time, 1 s
/// timeout) until one gets a 2xx; the time that took, per replica, and the keys used
/// (for the checker: each may execute once).
fn claims_back(stack: &Stack, name: &str, healed: Instant) -> ClaimsBack {
    let rec = Recorder::new();
    let name = name.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let mut tasks = Vec::new();
    for (i, url) in stack.replica_urls().into_iter().enumerate() {
        let (rec, http, name) = (rec.clone(), stack.http.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let mut plans = Vec::new();
            for n in 0..200 {
                let req = Arc::new(Req {
                    tenant: 0,
                    key: format!("{name}-back-gw{i}-{n}"),
                    path: "/v1/payments?latency_ms=1".into(),
                    body: format!("{{\"amount\":{n},\"currency\":\"eur\"}}"),
                });
                plans.push(Plan {
                    key: req.key.clone(),
                    class: KeyClass::Normal,
                    reqs: vec![req.clone()],
                });
                let got = rec
                    .send(&http, &url, &req, Duration::from_secs(1), Phase::Load)
                    .await;
                if matches!(&got, Got::Resp(r) if (200..300).contains(&r.status)) {
                    return (Some(healed.elapsed()), plans);
                }
                if healed.elapsed() > Duration::from_secs(15) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (None, plans)
        }));
    }
    ClaimsBack { tasks }
}

struct ClaimsBack {
    tasks: Vec<tokio::task::JoinHandle<(Option<Duration>, Vec<Plan>)>>,
}

impl ClaimsBack {
    /// The note ("claims back after the heal: gw0 120 ms, ...") and the probe keys.
    async fn collect(self) -> (String, Vec<Plan>, Vec<Option<Duration>>) {
        let mut parts = Vec::new();
        let mut plans = Vec::new();
        let mut times = Vec::new();
        for (i, t) in self.tasks.into_iter().enumerate() {
            let (took, p) = t.await.expect("probe task");
            parts.push(match took {
                Some(d) => format!("gw{i} {} ms", d.as_millis()),
                None => format!("gw{i} not within 15 s"),
            });
            plans.extend(p);
            times.push(took);
        }
        let note = format!("claims back after the heal: {}", parts.join(", "));
        (note, plans, times)
    }
}

/// The load's end, the probes and the checker; `notes` first in the row.
async fn settle(
    name: &str,
    stack: &mut Stack,
    mut run: Running,
    back: ClaimsBack,
    d: Durability,
    notes: Vec<String>,
) -> Report {
    let mut plans = run.plans().await;
    let (back_note, probe_plans, _) = back.collect().await;
    plans.extend(probe_plans);
    // Before the final passes (and the durable pass's FLUSHALL): the fleet as the heal
    // left it, every replica asked for every acknowledged key.
    stack.wait_all_ready(Duration::from_secs(20)).await;
    let acked = crate::checker::acknowledged(&run.rec.all(), &plans);
    let disagree = replicas_disagree(stack, acked).await;
    let mut report = finish(name, stack, &run, &plans, expect_for(d)).await;
    report.notes.splice(0..0, notes);
    report.notes.push(back_note);
    report.notes.push(format!(
        "after the heal, keys answered differently by the replicas {}",
        disagree.len()
    ));
    if !disagree.is_empty() {
        let n = disagree.len();
        let some: Vec<String> = disagree.into_iter().take(5).collect();
        let what =
            format!("{n} keys answered differently by the replicas after the heal: {some:?}");
        // In every mode, even where a key may run twice: once healed, the replicas
        // answer what the authoritative tier holds (Redis with claims = "redis", whose
        // Postgres may hold the other execution's response; see `split_authority`).
        report.fail(what);
    }
    report
}

/// After the final passes: every acknowledged request sent to each replica directly
/// (32 at a time); the keys whose 2xx answers differ between replicas (a replica
/// serving a response its tier no longer holds, from its replay cache). Answers other
/// than 2xx are not compared.
async fn replicas_disagree(stack: &Stack, reqs: Vec<Arc<Req>>) -> Vec<String> {
    let rec = Recorder::new();
    let urls = stack.replica_urls();
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for req in reqs {
        let (rec, http, urls, gate) = (rec.clone(), stack.http.clone(), urls.clone(), gate.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            let mut seen: Vec<crate::driver::Resp> = Vec::new();
            for url in &urls {
                let got = rec
                    .send(&http, url, &req, Duration::from_secs(5), Phase::Final)
                    .await;
                if let Got::Resp(r) = got {
                    if (200..300).contains(&r.status) && !seen.iter().any(|s| s.same_as(&r)) {
                        seen.push(r);
                    }
                }
            }
            (seen.len() > 1).then(|| format!("tenant-{} {}", req.tenant, req.key))
        });
    }
    let mut disagree = Vec::new();
    while let Some(done) = tasks.join_next().await {
        disagree.extend(done.ok().flatten());
    }
    disagree.sort();
    disagree
}

/// 1. One gateway replica cut off from Redis (both ways) from 2 s to 8 s; HAProxy
///    still sends it keys, Postgres and the upstream stay reachable.
pub async fn gateway_cut_from_redis(name: String, d: Durability) -> Report {
    cut_one_gateway(name, d, |stack, gw0| {
        cut(stack, &[gw0], &[&stack.places.redis[0]]);
    })
    .await
}

/// Scenarios 1, 4 and 5: one standalone Redis, `cut` applied to gateway replica 0 at
/// 2 s, everything healed at 8 s.
async fn cut_one_gateway(name: String, d: Durability, cut: impl FnOnce(&Stack, &Host)) -> Report {
    let mut stack = Stack::start(options(Topology::Single, d, false)).await;
    let run = start(workload(&name, &stack));
    let gw0 = stack.places.gateways[0].clone();
    run.at(CUT_AT).await;
    cut(&stack, &gw0);
    run.at(HEAL_AT).await;
    let healed = heal(&stack);
    let back = claims_back(&stack, &name, healed);
    settle(&name, &mut stack, run, back, d, Vec::new()).await
}

/// 2. A Redis Cluster primary and one gateway replica in the minority, the other five
///    nodes and two replicas in the majority. `promote`: healed at 8 s, after the
///    majority promoted the primary's replica (the old primary rejoins as its replica,
///    losing what it took meanwhile); otherwise healed 600 ms after the cut, before the
///    node timeout (1 s), so no promotion happens.
pub async fn cluster_minority(name: String, d: Durability, wait: bool, promote: bool) -> Report {
    let mut stack = Stack::start(options(Topology::Cluster, d, wait)).await;
    tokio::task::block_in_place(|| crate::failover::sync_at_once(&stack));
    let (victim, replica) = tokio::task::block_in_place(|| {
        let c = stack.redis_cluster.as_ref().unwrap();
        let victim = c.primary_for_slot(0);
        (
            victim,
            c.replica_of(victim).expect("the victim has a replica"),
        )
    });
    let places = stack.places.clone();
    let minority = [&places.redis[victim], &places.gateways[0]];
    let majority: Vec<&Host> = (places.redis.iter().enumerate())
        .filter(|(i, _)| *i != victim)
        .map(|(_, h)| h)
        .chain(places.gateways.iter().skip(1))
        .collect();
    let run = start(workload(&name, &stack));
    run.at(CUT_AT).await;
    cut(&stack, &minority, &majority);
    let cut_at = Instant::now();
    let mut notes = Vec::new();
    if promote {
        let promoted = tokio::task::block_in_place(|| {
            let c = stack.redis_cluster.as_ref().unwrap();
            c.wait_primary(replica, Duration::from_secs(20));
            cut_at.elapsed()
        });
        notes.push(format!(
            "replica promoted {} ms after the cut",
            promoted.as_millis()
        ));
        run.at(HEAL_AT).await;
    } else {
        run.at(SHORT_HEAL_AT).await;
    }
    let healed = heal(&stack);
    let back = claims_back(&stack, &name, healed);
    tokio::task::block_in_place(|| {
        let c = stack.redis_cluster.as_ref().unwrap();
        c.wait_ok(Duration::from_secs(30));
        let role = c.nodes()[victim].cli(&["ROLE"]);
        let role = role.lines().next().unwrap_or_default().to_string();
        notes.push(format!("old primary is a {role} after the heal"));
    });
    settle(&name, &mut stack, run, back, d, notes).await
}

/// 3. Sentinel: the primary, one sentinel and one gateway replica in the minority; the
///    replica, two sentinels (a quorum) and two gateway replicas in the majority, which
///    promotes the replica; healed at 8 s (the sentinels then demote the old primary,
///    which loses what it took meanwhile).
pub async fn sentinel_minority(name: String, d: Durability, wait: bool) -> Report {
    let mut stack = Stack::start(options(Topology::Sentinel, d, wait)).await;
    tokio::task::block_in_place(|| crate::failover::sync_at_once(&stack));
    let places = stack.places.clone();
    let minority = [&places.redis[0], &places.sentinels[0], &places.gateways[0]];
    let majority = [
        &places.redis[1],
        &places.sentinels[1],
        &places.sentinels[2],
        &places.gateways[1],
        &places.gateways[2],
    ];
    let run = start(workload(&name, &stack));
    run.at(CUT_AT).await;
    cut(&stack, &minority, &majority);
    let cut_at = Instant::now();
    let mut notes = Vec::new();
    let promoted = tokio::task::block_in_place(|| {
        let set = stack.sentinels.as_ref().unwrap();
        set.wait_primary_among(&[1], &[1, 2], Duration::from_secs(20))
    });
    notes.push(match promoted {
        Some(_) => format!(
            "replica promoted {} ms after the cut",
            cut_at.elapsed().as_millis()
        ),
        None => "no promotion within 20 s".into(),
    });
    run.at(HEAL_AT).await;
    let healed = heal(&stack);
    let back = claims_back(&stack, &name, healed);
    tokio::task::block_in_place(|| {
        let set = stack.sentinels.as_ref().unwrap();
        set.wait_agreed(Duration::from_secs(30));
        notes.push(format!(
            "after the heal the sentinels name redis{} (redis0 was the primary)",
            set.primary()
        ));
    });
    settle(&name, &mut stack, run, back, d, notes).await
}

/// 4. Postgres cut off from one gateway replica (both ways) from 2 s to 8 s, Redis
///    reachable from every replica.
pub async fn postgres_cut(name: String, d: Durability) -> Report {
    cut_one_gateway(name, d, |stack, gw0| {
        cut(stack, &[gw0], &[&stack.places.pg])
    })
    .await
}

/// 5. Asymmetric: from 2 s to 8 s one gateway replica's commands reach Redis and are
///    executed there, but Redis' replies to it are lost (and so are new handshakes).
pub async fn redis_replies_lost(name: String, d: Durability) -> Report {
    cut_one_gateway(name, d, |stack, gw0| {
        let redis = &stack.places.redis[0];
        tokio::task::block_in_place(|| lab(stack).cut_replies(gw0, redis)).expect("nft cut");
    })
    .await
}
