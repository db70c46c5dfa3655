//! The rows of Redis Cluster and Sentinel failovers and of a reshard under load
//! ([`crate::failover`]).

use crate::cluster::Durability::{FilledOnReplay, Postgres, RedisOnly, WriteThrough};
use crate::failover;
use crate::harness::run;

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_claims_redis() {
    run("cluster primary SIGKILLed [claims=redis]", |n| {
        failover::cluster_primary_killed(n, Postgres, false)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_claims_redis_replica_acks() {
    run(
        "cluster primary SIGKILLed [claims=redis, replica_acks=1]",
        |n| failover::cluster_primary_killed(n, Postgres, true),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_claims_write_through() {
    run("cluster primary SIGKILLed [claims=write_through]", |n| {
        failover::cluster_primary_killed(n, WriteThrough, false)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_claims_write_through_replica_acks() {
    run(
        "cluster primary SIGKILLed [claims=write_through, replica_acks=1]",
        |n| failover::cluster_primary_killed(n, WriteThrough, true),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_redis_only() {
    run("cluster primary SIGKILLed [redis-only]", |n| {
        failover::cluster_primary_killed(n, RedisOnly, false)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_redis_only_replica_acks() {
    run(
        "cluster primary SIGKILLed [redis-only, replica_acks=1]",
        |n| failover::cluster_primary_killed(n, RedisOnly, true),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_slots_resharded_under_load() {
    run(
        "cluster slots resharded under load [claims=redis]",
        failover::cluster_resharded,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn sentinel_failover_claims_redis() {
    run("sentinel failover, primary SIGKILLed [claims=redis]", |n| {
        failover::sentinel_failover(n, Postgres, false)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn sentinel_failover_claims_write_through() {
    run(
        "sentinel failover, primary SIGKILLed [claims=write_through]",
        |n| failover::sentinel_failover(n, WriteThrough, false),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn sentinel_failover_redis_only_replica_acks() {
    run(
        "sentinel failover, primary SIGKILLed [redis-only, replica_acks=1]",
        |n| failover::sentinel_failover(n, RedisOnly, true),
    );
}

// `postgres.redis_fill = "on_replay"`: Postgres decides, as with write-through claims,
// so these rows must show no duplicate and nothing lost either.

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_filled_on_replay() {
    run(
        "cluster primary SIGKILLed [claims=write_through, redis_fill=on_replay]",
        |n| failover::cluster_primary_killed(n, FilledOnReplay, false),
    );
}
