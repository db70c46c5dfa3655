//! Faults of the stores: Redis restarted empty, paused, down or out of memory, and
//! Postgres stopped or slow.

use std::time::{Duration, Instant};

use fred::prelude::{Builder, ClientLike, Config as FredConfig, KeysInterface};

use super::{expect_for, in_flight_heavy, options, EXACTLY_ONCE};
use crate::checker::Report;
use crate::cluster::{Durability, Stack};
use crate::harness::{finish, start};

/// Redis restarted (SIGKILL, no persistence) mid-load: every key, lease and stored
/// response in Redis is gone.
pub async fn redis_restart(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(3000).await;
    stack.redis.restart_empty();
    let plans = run.plans().await;
    finish(&name, &mut stack, &run, &plans, expect_for(d)).await
}

/// Redis paused past the command timeout: `CLIENT PAUSE 2000 ALL`, then `DEBUG SLEEP 2`.
pub async fn redis_pause(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    let paused = stack.redis.cli(&["CLIENT", "PAUSE", "2000", "ALL"]);
    assert_eq!(paused.trim(), "OK", "CLIENT PAUSE: {paused}");
    run.at(5000).await;
    let port = stack.redis.port;
    let sleeper = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "2"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    });
    let plans = run.plans().await;
    let slept = sleeper.join().unwrap().unwrap_or_default();
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    if slept != "OK" {
        report.fail(format!("DEBUG SLEEP did not run: {slept:?}"));
    }
    report
        .notes
        .push(format!("breaker trips {}", breaker_trips(&stack)));
    report
}

/// Redis killed and kept down 3 s, then back with its data (AOF, fsync always).
pub async fn redis_down(name: String, d: Durability) -> Report {
    let mut opts = options(d);
    opts.redis_args = ["--appendonly", "yes", "--appendfsync", "always"]
        .map(String::from)
        .to_vec();
    let mut stack = Stack::start(opts).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    let killed = Instant::now();
    stack.redis.stop();
    run.at(5500).await;
    stack.redis.start_again();
    // Back with its data, but a new process: the markers loaded from the AOF vouch for
    // nothing (claims in Redis with Postgres behind: the only mode that reads them).
    let markers = if d == Durability::Postgres {
        let url = stack.redis.url();
        Some(
            crate::failover::markers_vouching_across(&url, &[(0, 16383)], killed.elapsed(), 300)
                .await,
        )
    } else {
        None
    };
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    crate::failover::markers_note(&mut report, markers);
    report
        .notes
        .push(format!("breaker trips {}", breaker_trips(&stack)));
    report
}

fn breaker_trips(stack: &Stack) -> usize {
    stack.logs().matches("redis failing: claims follow").count()
}

/// Postgres stopped during write-through for 3 s, then back.
pub async fn postgres_stopped(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    stack.pg.as_mut().unwrap().stop();
    run.at(5500).await;
    stack.pg.as_mut().unwrap().restart();
    let plans = run.plans().await;
    // Redis keeps claiming and serving; durable copies queue until Postgres is back.
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let queued = stack.logs().matches("durable copy queued").count();
    let failures = stack
        .metric_sum("idemgate_write_through_failures_total")
        .await;
    let dropped = stack
        .metric_sum("idemgate_write_through_dropped_total")
        .await;
    report.notes.push(format!(
        "queued {queued}, failed statements {failures}, dropped {dropped}"
    ));
    if dropped > 0.0 {
        report.fail(format!("{dropped} durable copies dropped"));
    }
    report
}

/// Postgres slow: `LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE` held in an open
/// transaction for 3 s (statement_timeout is 1 s).
pub async fn postgres_slow(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    let locker = stack.pg.as_ref().unwrap().client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock the table");
    run.at(5500).await;
    locker
        .batch_execute("COMMIT")
        .await
        .expect("release the lock");
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let failures = stack
        .metric_sum("idemgate_write_through_failures_total")
        .await;
    report.notes.push(format!("failed statements {failures}"));
    report
}

/// Redis under `maxmemory 2mb` with `allkeys-lru` while a filler writes junk: leases and
/// stored responses get evicted. The gateway must warn at start-up.
pub async fn redis_maxmemory(name: String, d: Durability) -> Report {
    let mut opts = options(d);
    opts.redis_args = ["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]
        .map(String::from)
        .to_vec();
    let mut stack = Stack::start(opts).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    let filler = {
        let url = stack.redis.url();
        let t0 = run.t0;
        tokio::spawn(async move {
            let client = Builder::from_config(FredConfig::from_url(&url).unwrap())
                .build()
                .unwrap();
            client.init().await.unwrap();
            let junk = "x".repeat(2048);
            let mut i = 0u64;
            while t0.elapsed() < Duration::from_secs(8) {
                for _ in 0..20 {
                    let _: Result<(), _> = client
                        .set(format!("junk:{i}"), junk.as_str(), None, None, false)
                        .await;
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = client.quit().await;
            i
        })
    };
    let plans = run.plans().await;
    let junk = filler.await.unwrap_or(0);
    let evicted = stack.redis.info("evicted_keys").unwrap_or_default();
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    let warned = stack
        .replicas
        .iter()
        .filter(|r| r.log_text().contains("maxmemory-policy is not noeviction"))
        .count();
    report.notes.push(format!(
        "{junk} junk keys, evicted {evicted}, start-up warning in {warned}/{} logs",
        stack.replicas.len()
    ));
    if warned != stack.replicas.len() {
        report.fail("the start-up maxmemory-policy warning is missing from a replica's log");
    }
    if evicted.parse::<u64>().unwrap_or(0) == 0 {
        report.fail("nothing was evicted: the scenario did not exercise eviction");
    }
    report
}
