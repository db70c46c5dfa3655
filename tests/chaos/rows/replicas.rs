//! The rows of the replicas' faults: SIGKILL (with clients that never retry, for the
//! completer), SIGTERM, SIGSTOP, a replica cut off from Redis, a rolling restart.

use crate::cluster::Durability::{FilledOnReplay, Postgres, WriteThrough};
use crate::harness::run;
use crate::{completer, rolling, scenarios};

#[test]
#[ignore = "chaos: make chaos"]
fn completer_sigkill_no_retry() {
    run(
        "replicas SIGKILLed, 40% of clients never retry [completer]",
        completer::sigkill_no_retry,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn replica_killed_with_sigkill() {
    run("replica SIGKILLed holding leases", |n| {
        scenarios::replica_sigkill(n, Postgres)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn replica_stopped_with_sigterm() {
    run(
        "replica SIGTERM: graceful drain",
        scenarios::replica_sigterm,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn replica_paused_past_its_lease() {
    run("replica SIGSTOPped past its lease, resumed", |n| {
        scenarios::replica_sigstop(n, Postgres)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn replica_cut_off_from_redis_claims_redis() {
    run("one replica cut off from redis [claims=redis]", |n| {
        scenarios::replica_cut_off(n, Postgres)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn replica_cut_off_from_redis_claims_write_through() {
    run(
        "one replica cut off from redis [claims=write_through]",
        |n| scenarios::replica_cut_off(n, WriteThrough),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn rolling_restart_under_load() {
    let name = crate::lifecycle::named(
        "rolling restart of every replica under load, slow calls and live streams in flight".into(),
    );
    run(&name, rolling::rolling_restart);
}

// `postgres.redis_fill = "on_replay"`: Postgres decides, as with write-through claims,
// so these rows must show no duplicate and nothing lost either.

#[test]
#[ignore = "chaos: make chaos"]
fn replica_cut_off_from_redis_filled_on_replay() {
    run(
        "one replica cut off from redis [claims=write_through, redis_fill=on_replay]",
        |n| scenarios::replica_cut_off(n, FilledOnReplay),
    );
}
