//! Chaos suite: a fleet of real processes on loopback (redis-server, PostgreSQL, the
//! demo upstream, three `idemgate serve` replicas, HAProxy in front), a driver sending
//! keyed requests with retries and concurrent duplicates while a fault is injected
//! mid-run, and a checker asserting the invariants afterwards (see `checker/mod.rs`).
//! Each scenario prints one table row (scenario, requests, executions, duplicates,
//! lost, verdict) and appends it to `target/tmp/chaos-report.md`.
//!
//! `make chaos` runs every scenario (`--ignored`, one at a time); `cargo test` runs the
//! fast ones (those not marked `#[ignore]`). Where a mode cannot give exactly-once (a
//! key claimed only in Redis when Redis loses it), the row says MEASURED and reports
//! the duplicates; the same scenario with `postgres.claims = "write_through"` must
//! show none.

// Shared with the integration tests (tests/support).
use idemgate_testkit::{attack_upstream, h2wire, postgres, redis};

mod abuse;
mod answers;
mod checker;
mod claim_faults;
mod cluster;
mod completer;
mod driver;
mod failover;
mod faultproxy;
mod h2_attacks;
mod h2_floods;
mod harness;
mod lifecycle;
mod partition;
mod pg_ha;
mod report;
mod rolling;
mod scenarios;
mod slow_upstream;
mod vouched;

use cluster::Durability::{FilledOnReplay, Postgres, RedisOnly, WriteThrough};
use harness::run;

// ---- fast subset: runs in `cargo test` / `make test` ----

#[test]
fn hot_key_1000_concurrent_identical_requests() {
    run("1000 concurrent identical requests, one key", |n| {
        scenarios::hot_key(n, false)
    });
}

#[test]
fn upstream_failing_with_5xx() {
    run("upstream failing with 5xx", |n| {
        scenarios::upstream_5xx(n, 3)
    });
}

#[test]
fn clients_disconnecting_mid_request() {
    run("clients disconnecting mid-request", |n| {
        scenarios::client_disconnect(n, 3)
    });
}

#[test]
fn http2_rapid_reset_and_stream_count_floods() {
    run(
        "abuse: HTTP/2 rapid-reset and stream-count floods, one connection at a time",
        |n| h2_floods::floods(n, h2_floods::FAST),
    );
}

// ---- slow scenarios: `make chaos` ----

#[test]
#[ignore = "chaos: make chaos"]
fn redis_restarted_data_lost_claims_redis() {
    run("redis restarted, data lost [claims=redis]", |n| {
        scenarios::redis_restart(n, Postgres)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_restarted_data_lost_claims_write_through() {
    run("redis restarted, data lost [claims=write_through]", |n| {
        scenarios::redis_restart(n, WriteThrough)
    });
}

// `postgres.redis_fill = "on_replay"`: Postgres decides, as with write-through claims,
// so these rows must show no duplicate and nothing lost either.

#[test]
#[ignore = "chaos: make chaos"]
fn redis_restarted_data_lost_filled_on_replay() {
    run(
        "redis restarted, data lost [claims=write_through, redis_fill=on_replay]",
        |n| scenarios::redis_restart(n, FilledOnReplay),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_killed_down_3s_filled_on_replay() {
    run(
        "redis killed, down 3s, back [claims=write_through, redis_fill=on_replay]",
        |n| scenarios::redis_down(n, FilledOnReplay),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_paused_filled_on_replay() {
    run(
        "redis paused: CLIENT PAUSE 2s, DEBUG SLEEP 2 [claims=write_through, redis_fill=on_replay]",
        |n| scenarios::redis_pause(n, FilledOnReplay),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn replica_cut_off_from_redis_filled_on_replay() {
    run(
        "one replica cut off from redis [claims=write_through, redis_fill=on_replay]",
        |n| scenarios::replica_cut_off(n, FilledOnReplay),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn cluster_primary_killed_filled_on_replay() {
    run(
        "cluster primary SIGKILLed [claims=write_through, redis_fill=on_replay]",
        |n| failover::cluster_primary_killed(n, FilledOnReplay, false),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_restarted_data_lost_redis_only() {
    run("redis restarted, data lost [redis-only]", |n| {
        scenarios::redis_restart(n, RedisOnly)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_paused_claims_redis() {
    run(
        "redis paused: CLIENT PAUSE 2s, DEBUG SLEEP 2 [claims=redis]",
        |n| scenarios::redis_pause(n, Postgres),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_paused_claims_write_through() {
    run(
        "redis paused: CLIENT PAUSE 2s, DEBUG SLEEP 2 [claims=write_through]",
        |n| scenarios::redis_pause(n, WriteThrough),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_killed_down_3s_claims_redis() {
    run("redis killed, down 3s, back [claims=redis]", |n| {
        scenarios::redis_down(n, Postgres)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_killed_down_3s_claims_write_through() {
    run("redis killed, down 3s, back [claims=write_through]", |n| {
        scenarios::redis_down(n, WriteThrough)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn postgres_stopped_during_write_through() {
    run(
        "postgres stopped 3s during write-through [claims=redis]",
        |n| scenarios::postgres_stopped(n, Postgres),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn postgres_slow_table_locked() {
    run("postgres slow: table locked 3s [claims=redis]", |n| {
        scenarios::postgres_slow(n, Postgres)
    });
}

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
fn upstream_slow_past_the_lease() {
    run("upstream slower than the lease", scenarios::upstream_slow);
}

#[test]
#[ignore = "chaos: make chaos"]
fn slow_upstream_answering_3x_past_upstream_timeout() {
    run(
        "slow upstream: answers 3x past upstream_timeout, clients retry on 504 and 409",
        slow_upstream::slow_upstream,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn upstream_resetting_after_acting_release() {
    run("upstream resets after acting [on_ambiguous=release]", |n| {
        scenarios::upstream_reset(n, "release")
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn upstream_resetting_after_acting_store() {
    run("upstream resets after acting [on_ambiguous=store]", |n| {
        scenarios::upstream_reset(n, "store")
    });
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
fn redis_maxmemory_evicting_claims_redis() {
    run("redis maxmemory 2mb allkeys-lru [claims=redis]", |n| {
        scenarios::redis_maxmemory(n, Postgres)
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn redis_maxmemory_evicting_claims_write_through() {
    run(
        "redis maxmemory 2mb allkeys-lru [claims=write_through]",
        |n| scenarios::redis_maxmemory(n, WriteThrough),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn hot_key_1000_concurrent_identical_requests_waiting() {
    run(
        "1000 concurrent identical requests, one key [in_flight=wait]",
        |n| scenarios::hot_key(n, true),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn clients_timing_out_during_a_slow_claim() {
    run(
        "clients time out during a slow claim, then retry [redis-only]",
        claim_faults::slow_claim_timeouts,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn impatient_waiters_on_hot_keys() {
    run(
        "impatient waiters on hot keys [in_flight=wait]",
        claim_faults::impatient_waiters,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn slow_readers_of_a_large_response_and_a_connection_burst() {
    run(
        "abuse: 120 slow readers of a 6 MiB replay, 600-connection burst",
        abuse::slow_readers_and_a_connection_burst,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_floods_four_attackers() {
    run(
        "abuse: HTTP/2 rapid-reset and stream-count floods, 4 attackers at once, 10 s each",
        |n| h2_floods::floods(n, h2_floods::HEAVY),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_stalled_readers() {
    run(
        "abuse: HTTP/2 stalled readers, 2 connections x 40 replays of 1 MiB, windows never opened",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::StalledReaders),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_declared_bodies() {
    run(
        "abuse: HTTP/2 declared bodies, 100 keyed POSTs declaring 1 MiB, no byte sent",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::DeclaredBodies),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_stream_slots() {
    run(
        "abuse: HTTP/2 stream slots, 2 connections x 100 bodiless keyed POSTs",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::StreamSlots),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_resets_after_the_claim() {
    run(
        "abuse: HTTP/2 resets after the claim, keyed POSTs to a 3 s upstream reset after 5 ms",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::ResetAfterClaim),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_idle_connections() {
    run(
        "abuse: HTTP/2 idle connections, 200 that only answer or send PINGs",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::IdleConnections),
    );
}

// ---- Redis Cluster and Sentinel failover, resharding (chaos/failover.rs) ----

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

#[test]
#[ignore = "chaos: make chaos"]
fn rolling_restart_under_load() {
    run(
        "rolling restart of every replica under load, slow calls and live streams in flight",
        rolling::rolling_restart,
    );
}
