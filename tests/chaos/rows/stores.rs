//! The rows of the stores' faults ([`crate::scenarios`]): Redis restarted, down,
//! paused or evicting, Postgres stopped or slow, in each claims mode.

use crate::cluster::Durability::{FilledOnReplay, Postgres, RedisOnly, WriteThrough};
use crate::harness::run;
use crate::scenarios;

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
