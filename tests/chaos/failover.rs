//! A Redis Cluster primary SIGKILLed (its replica
//! promoted by the cluster), slots resharded between primaries, and a Sentinel
//! failover, each on a fleet of three replicas in `redis.mode = "cluster"` or
//! `"sentinel"` (the fleet launcher's `RedisCluster` and `SentinelSet`). Nodes keep no
//! data across a restart, so what a promoted replica had not received is gone: the
//! window that `redis.replica_acks` narrows, measured here with and without it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checker::{Expect, Report};
use crate::cluster::{Durability, Options, Stack, Topology};
use crate::driver::{Got, KeyClass, Phase, Workload};
use crate::harness::{finish, start};
use idemgate::testing::store::redis::slots::Slotted;
use idemgate::testing::store::redis::OnLapsed;

/// Exactly once only with `claims = "write_through"`; durable unless Redis-only.
pub fn expect_for(d: Durability) -> Expect {
    Expect {
        exactly_once: d.claims_durable(),
        durable: d != Durability::RedisOnly,
    }
}

pub fn options(topology: Topology, d: Durability, replica_acks: bool) -> Options {
    Options {
        topology,
        durability: d,
        redis: if replica_acks {
            "replica_acks = 1\nreplica_ack_timeout = \"100ms\"\n".into()
        } else {
            String::new()
        },
        ..Options::default()
    }
}

/// Replicas (re)joining are synced at once (Redis' default waits 5 s, during which
/// `WAIT` does not count them): set on every running data node after the start.
pub fn sync_at_once(stack: &Stack) {
    let set = ["CONFIG", "SET", "repl-diskless-sync-delay", "0"];
    if let Some(c) = stack.redis_cluster.as_ref() {
        for i in 0..c.nodes().len() {
            c.cli(i, &set);
        }
    }
    if let Some(s) = stack.sentinels.as_ref() {
        for n in s.servers() {
            n.cli(&set);
        }
    }
}

/// Keys spend 50-250 ms in the upstream, so many leases are live when the fault hits.
fn in_flight_heavy(scenario: &str, stack: &Stack) -> Workload {
    let mut w = Workload::new(scenario, vec![stack.front()]);
    w.shape = Arc::new(|n| (format!("?latency_ms={}", 50 + n % 5 * 50), KeyClass::Normal));
    w
}

/// Mean duration of the completion script (`idemgate_redis_duration_seconds`,
/// `op="complete"`) over the running replicas, in microseconds, and the completions
/// counted.
async fn completion_mean_us(stack: &mut Stack) -> (f64, f64) {
    let (mut sum, mut count) = (0.0, 0.0);
    for r in stack.replicas.iter_mut() {
        if !r.running() {
            continue;
        }
        let url = format!("{}/metrics", r.admin_url());
        let Ok(resp) = stack.http.get(url).send().await else {
            continue;
        };
        let text = resp.text().await.unwrap_or_default();
        for line in text.lines() {
            let value = || line.rsplit(' ').next()?.parse::<f64>().ok();
            if line.starts_with("idemgate_redis_duration_seconds_sum{op=\"complete\"") {
                sum += value().unwrap_or(0.0);
            } else if line.starts_with("idemgate_redis_duration_seconds_count{op=\"complete\"") {
                count += value().unwrap_or(0.0);
            }
        }
    }
    let mean = if count > 0.0 { sum / count * 1e6 } else { 0.0 };
    (mean, count)
}

async fn wait_notes(stack: &mut Stack, report: &mut Report) {
    // Completions that failed (the shard had no primary): their client got the
    // upstream's response all the same, but nothing was stored.
    let unstored = stack.logs().matches("could not store the response").count();
    report
        .notes
        .push(format!("completions not stored (logged) {unstored}"));
    let (mean, count) = completion_mean_us(stack).await;
    let short = stack.metric_sum("idemgate_redis_wait_short_total").await;
    report.notes.push(format!(
        "completion script mean {mean:.0} us over {count} completions; WAIT short {short}"
    ));
}

/// Load-phase answers that are neither a success, a replay, a 409 nor a 4xx the
/// client caused: what a client sees as an error.
fn client_errors(run: &crate::harness::Running) -> Vec<String> {
    (run.rec.all().iter())
        .filter(|e| e.phase == Phase::Load)
        .filter_map(|e| match &e.got {
            Got::Resp(r) if r.status >= 500 => Some(format!(
                "{} {}",
                r.status,
                r.problem_code().unwrap_or_default()
            )),
            Got::Resp(_) => None,
            Got::Timeout => Some("timeout".into()),
            Got::Error(e) => Some(format!("conn-error {e}")),
        })
        .collect()
}

/// A cluster primary SIGKILLed at 3 s under load; its replica is promoted by the
/// cluster (node timeout 1 s); the old primary comes back 3 s later, empty, as a replica.
pub async fn cluster_primary_killed(name: String, d: Durability, replica_acks: bool) -> Report {
    let mut stack = Stack::start(options(Topology::Cluster, d, replica_acks)).await;
    tokio::task::block_in_place(|| sync_at_once(&stack));
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(3000).await;
    let killed = Instant::now();
    let (victim, failover_ms, link, lag, promoted) = tokio::task::block_in_place(|| {
        let cluster = stack.redis_cluster.as_mut().unwrap();
        let victim = cluster.primary_for_slot(0);
        let replica = cluster
            .replica_of(victim)
            .expect("the victim has a replica");
        // The replica's state at the kill: a replica not yet synced (never linked) is
        // promoted all the same (`cluster-replica-validity-factor 0`) with nothing.
        let offset = |i: usize, f: &str| {
            (cluster.nodes()[i].info(f))
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(-1)
        };
        let link = cluster.nodes()[replica].info("master_link_status");
        let lag = offset(victim, "master_repl_offset") - offset(replica, "slave_repl_offset");
        let t = Instant::now();
        cluster.kill(victim);
        // The old primary is started again only after this: it rejoins as a replica.
        cluster.wait_primary(replica, Duration::from_secs(20));
        (victim, t.elapsed().as_millis(), link, lag, replica)
    });
    run.at(6000).await;
    tokio::task::block_in_place(|| {
        let cluster = stack.redis_cluster.as_mut().unwrap();
        cluster.start_again(victim);
        cluster.wait_ok(Duration::from_secs(20));
    });
    // The markers the promoted replica received vouch for nothing (claims in Redis with
    // Postgres behind: the only mode that reads them).
    let markers = if d == Durability::Postgres {
        let cluster = stack.redis_cluster.as_ref().unwrap();
        let (url, ranges) = tokio::task::block_in_place(|| {
            (cluster.nodes()[promoted].url(), cluster.slots_of(promoted))
        });
        Some(markers_vouching_across(&url, &ranges, killed.elapsed(), 300).await)
    } else {
        None
    };
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    report.notes.push(format!(
        "replica link {} and {lag} bytes behind at the kill; promoted {failover_ms} ms after \
         the kill",
        link.unwrap_or_default()
    ));
    markers_note(&mut report, markers);
    wait_notes(&mut stack, &mut report).await;
    report
}

/// 4,000 slots moved from one primary to another with `redis-cli --cluster reshard`
/// under load, then 2,000 of them on to the third: no client may see an error, and
/// nothing may run twice or be lost (`claims = "redis"` with Postgres).
pub async fn cluster_resharded(name: String) -> Report {
    let mut stack = Stack::start(options(Topology::Cluster, Durability::Postgres, false)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(1500).await;
    let moves = tokio::task::block_in_place(|| {
        let cluster = stack.redis_cluster.as_ref().unwrap();
        let p = cluster.primaries();
        let mut moves = Vec::new();
        for (from, to, slots) in [(p[0], p[1], 4000), (p[1], p[2], 2000)] {
            let t = Instant::now();
            let done = cluster.reshard(from, to, slots);
            moves.push((slots, t.elapsed().as_millis(), done));
        }
        moves
    });
    let plans = run.plans().await;
    let errors = client_errors(&run);
    let mut report = finish(
        &name,
        &mut stack,
        &run,
        &plans,
        Expect {
            exactly_once: true,
            durable: true,
        },
    )
    .await;
    for (slots, ms, done) in moves {
        match done {
            Ok(()) => report.notes.push(format!("{slots} slots moved in {ms} ms")),
            Err(e) => report.fail(format!("reshard of {slots} slots failed: {e}")),
        }
    }
    if !errors.is_empty() {
        let mut kinds: Vec<&String> = errors.iter().collect();
        kinds.sort();
        kinds.dedup();
        report.fail(format!(
            "{} client errors during the resharding: {kinds:?}",
            errors.len()
        ));
    }
    stack.keep_logs_of(&mut report, &name);
    report
}

/// The Sentinel primary SIGKILLed at 3 s under load; the sentinels promote the replica
/// (down-after 1 s); the old primary comes back 3 s later, empty, and is made a replica.
pub async fn sentinel_failover(name: String, d: Durability, replica_acks: bool) -> Report {
    let mut stack = Stack::start(options(Topology::Sentinel, d, replica_acks)).await;
    tokio::task::block_in_place(|| sync_at_once(&stack));
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(3000).await;
    let killed = Instant::now();
    let (victim, failover_ms) = tokio::task::block_in_place(|| {
        let set = stack.sentinels.as_mut().unwrap();
        let victim = set.primary();
        let t = Instant::now();
        set.kill_primary();
        (victim, t.elapsed().as_millis())
    });
    run.at(6000).await;
    tokio::task::block_in_place(|| {
        let set = stack.sentinels.as_mut().unwrap();
        set.start_again(victim);
        set.wait_agreed(Duration::from_secs(30));
    });
    // The markers the promoted replica received vouch for nothing (claims in Redis with
    // Postgres behind: the only mode that reads them).
    let markers = if d == Durability::Postgres {
        let set = stack.sentinels.as_ref().unwrap();
        let url = set.servers()[set.primary()].url();
        Some(markers_vouching_across(&url, &[(0, 16383)], killed.elapsed(), 300).await)
    } else {
        None
    };
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    report.notes.push(format!(
        "sentinels named the new primary {failover_ms} ms after the kill"
    ));
    markers_note(&mut report, markers);
    wait_notes(&mut stack, &mut report).await;
    report
}

/// After a fault that replaced the Redis process (a failover), the warmth markers the
/// new primary holds must not vouch for anything before the fault: each marker is
/// either renewed since (younger than the fault) or, when the claim script looks at it,
/// renewed at once (a replicated copy proves nothing). Probed with claims of `n` random
/// records on the primary at `url`, through a store whose markers vouch from 1 ms (so
/// every marker's origin is checked), of records in the slots `ranges` (inclusive) that
/// the server owns: (markers that vouched from before the fault, claims). Called before
/// `finish`, whose flush would remove every marker.
pub async fn markers_vouching_across(
    url: &str,
    ranges: &[(u16, u16)],
    since_fault: Duration,
    n: usize,
) -> (usize, usize) {
    use idemgate::idempotency::{Claim, Fingerprint, RecordId};
    use rand::Rng;
    let store = idemgate::testing::store::RedisStore::connect(&idemgate::config::RedisConfig {
        url: url.to_string(),
        ..Default::default()
    })
    .await
    .unwrap();
    store.set_vouch_after(Some(Duration::from_millis(1)));
    let fp = Fingerprint::new(
        &Default::default(),
        &http::Method::POST,
        &"/probe".parse().unwrap(),
        &http::HeaderMap::new(),
        b"",
    );
    let lease = Duration::from_secs(1);
    let (mut old, mut claims) = (0, 0);
    let owned = |slot: u16| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot));
    for _ in 0..n {
        let key = loop {
            let bytes: [u8; 32] = rand::rng().random();
            let key = store.record_key(RecordId::from_hex(&hex::encode(bytes)).unwrap());
            if owned(idemgate::testing::store::redis::slots::slot(&key)) {
                break key;
            }
        };
        if let Ok(Claim::Acquired(a)) = store
            .claim(
                Slotted::new(&key),
                &fp,
                "probe",
                (lease, lease),
                true,
                OnLapsed::Ask,
            )
            .await
        {
            claims += 1;
            if a.marker_age >= since_fault {
                old += 1;
            }
        }
    }
    (old, claims)
}

/// The note (and the failure) of [`markers_vouching_across`]'s probe.
pub fn markers_note(report: &mut Report, markers: Option<(usize, usize)>) {
    if let Some((old, claims)) = markers {
        report.notes.push(format!(
            "warmth markers vouching from before the fault: {old} of {claims} probe claims"
        ));
        if old > 0 || claims == 0 {
            report.fail(format!(
                "{old} of {claims} probe claims found a marker vouching from before the fault"
            ));
        }
    }
}
