//! Postgres' own bad day, on a real HA stack: a Patroni set (etcd and three nodes,
//! synchronous or asynchronous replication) behind the replicas, reached by a
//! multi-host URL with `target_session_attrs=read-write` (or through HAProxy asking
//! Patroni's REST API which node is the primary: [`row_via`]). Mid-load, the primary is
//! lost ([`PgFault::HostLoss`]: its patroni and postgres SIGKILLed), switched over
//! ([`PgFault::Switchover`], planned) or cut off from etcd, the other nodes and the
//! gateways until Patroni demotes it ([`PgFault::Partition`], then healed), or powered
//! off ([`PgFault::PowerOff`]: every packet reaching its host dropped, for the rest of
//! the row; listed first in the URL, so every new connection meets its silence first).
//! Then the
//! harness flushes Redis, so every replay must come from what the new primary kept.
//! Write-through with synchronous replication must be exactly once and durable; the
//! other rows are measured (asynchronous replication may lose the last commits).

mod rows;

use std::time::{Duration, Instant};

use idemgate_fleet::{Replication, PATRONI_TTL};

use crate::checker::{Expect, Report};
use crate::cluster::{Durability, Options, PgVia, Stack};
use crate::driver::{KeyClass, Workload};
use crate::harness::{finish, start};

/// What happens to the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgFault {
    HostLoss,
    Switchover,
    Partition,
    PowerOff,
}

/// When the fault hits, after the load started.
const FAULT_AT_MS: u64 = 2500;

fn expect(d: Durability, replication: Replication) -> Expect {
    let sync = replication == Replication::Sync;
    Expect {
        exactly_once: d.claims_durable() && sync,
        durable: sync,
    }
}

/// 2 replicas (keys alternate between them), keys spending 20-180 ms upstream; keys
/// retried for 20 s, past the failover.
fn workload(name: &str, stack: &Stack) -> Workload {
    let mut w = Workload::new(name, stack.replica_urls());
    w.duration = Duration::from_secs(7);
    w.workers = 16;
    w.key_deadline = Duration::from_secs(20);
    w.max_attempts = 80;
    w.shape =
        std::sync::Arc::new(|n| (format!("?latency_ms={}", 20 + n % 5 * 40), KeyClass::Normal));
    w
}

/// The fault; returns the old primary, the new one and how long the change took.
fn inject(stack: &mut Stack, fault: PgFault) -> (String, String, Duration) {
    let set = stack.patroni.as_mut().expect("a Patroni set");
    let old = set.primary().expect("a primary before the fault");
    let t0 = Instant::now();
    let within = Duration::from_secs(PATRONI_TTL + 20);
    let new = match fault {
        PgFault::HostLoss => {
            set.kill_node(&old);
            set.wait_new_primary(&old, within)
        }
        PgFault::Switchover => Some(set.switchover()),
        PgFault::Partition => {
            let primary = set.host_of(&old).clone();
            let mut others = vec![set.etcd().host.clone()];
            others.extend(
                set.names()
                    .iter()
                    .filter(|n| **n != old)
                    .map(|n| set.host_of(n).clone()),
            );
            others.extend(stack.places.gateways.iter().cloned());
            let others: Vec<_> = others.iter().collect();
            let lab = stack.lab.as_ref().expect("partitions need the lab");
            lab.cut(&[&primary], &others).expect("nft cut");
            let new = stack
                .patroni
                .as_ref()
                .unwrap()
                .wait_new_primary(&old, within);
            lab.heal().expect("nft heal");
            new
        }
        PgFault::PowerOff => {
            let primary = set.host_of(&old).clone();
            let lab = stack.lab.as_ref().expect("a power-off needs the lab");
            lab.power_off(&primary).expect("nft power off");
            let set = stack.patroni.as_ref().unwrap();
            set.wait_new_primary(&old, within)
        }
    };
    let took = t0.elapsed();
    let new = new.unwrap_or_else(|| panic!("no new primary {within:?} after {fault:?} of {old}"));
    (old, new, took)
}

/// One row, the replicas on the multi-host URL.
pub async fn row(name: String, d: Durability, replication: Replication, fault: PgFault) -> Report {
    row_via(name, d, replication, fault, PgVia::MultiHost).await
}

/// One row: the fleet on a Patroni set reached `via`, the fault mid-load, the old
/// primary brought back (as a replica), the checker's passes.
pub async fn row_via(
    name: String,
    d: Durability,
    replication: Replication,
    fault: PgFault,
    via: PgVia,
) -> Report {
    let opts = Options {
        replicas: 2,
        durability: d,
        pg_ha: Some((replication, via)),
        partitions: matches!(fault, PgFault::Partition | PgFault::PowerOff),
        ..Options::default()
    };
    let mut stack = Stack::start(opts).await;
    let mut run = start(workload(&name, &stack));
    run.at(FAULT_AT_MS).await;
    let (old, new, took) = tokio::task::block_in_place(|| {
        let changed = inject(&mut stack, fault);
        // The lost host comes back at once, rejoining while the load goes on (a host
        // powered off stays off).
        stack.patroni.as_mut().unwrap().restart_node(&changed.0);
        changed
    });
    let plans = run.plans().await;
    let rejoined = fault != PgFault::PowerOff
        && tokio::task::block_in_place(|| {
            (stack.patroni.as_ref().unwrap()).wait_replicas(Duration::from_secs(30))
        });
    let mut report = finish(&name, &mut stack, &run, &plans, expect(d, replication)).await;
    let after = match fault {
        PgFault::PowerOff => format!("{old} left powered off"),
        _ => format!("{old} back as a replica: {rejoined}"),
    };
    report.notes.push(format!(
        "{fault:?}: {old} -> {new} in {:.1} s; {after}",
        took.as_secs_f64()
    ));
    report
}
