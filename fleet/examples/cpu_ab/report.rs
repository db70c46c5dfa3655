//! cpu_ab's report after the rounds: Redis' cost over them, `perf record` runs with
//! `--record`, each variant's medians and its claims' and Postgres statements' counts.

use std::process::Command;
use std::time::Duration;

use crate::fleet::{redis_cpu, Services};
use crate::options::{Options, Pg};
use crate::row::Row;
use crate::{round_load, wrk, Variant};

/// Redis' CPU per request over the rounds (since `redis_cpu_before`), and its
/// commandstats.
pub fn redis_cost(s: &Services, variants: &[Variant], redis_cpu_before: f64) {
    let redis_cpu_s = redis_cpu(&s.redis_info_cpu()) - redis_cpu_before;
    let all: f64 = variants
        .iter()
        .flat_map(|v| v.rows.iter())
        .map(|r| r.requests)
        .sum();
    println!(
        "\nredis over the rounds: {:.1} us CPU per request ({all:.0} requests); commandstats:",
        redis_cpu_s * 1e6 / all
    );
    for line in s.redis.cli(&["INFO", "commandstats"]).lines() {
        if line.starts_with("cmdstat_") {
            println!("  {line}");
        }
    }
}

/// `perf record` of every variant during one more run each, into `PREFIX-LABEL.data`.
pub fn record(prefix: &str, variants: &[Variant], o: &Options) {
    let (conns, threads, secs) = (o.conns, o.threads, o.secs);
    // `perf record` of every variant during one more run each: cpu-clock samples, or
    // the event `CPU_AB_RECORD_EVENT` names (`sched:sched_waking`: who wakes whom).
    let event = std::env::var("CPU_AB_RECORD_EVENT").unwrap_or_else(|_| "cpu-clock".into());
    // A tracepoint fires per event: one stack in 50, not 499 per second.
    let (every, period) = match event.as_str() {
        "cpu-clock" => ("-F", "499"),
        _ => ("-c", "50"),
    };
    for v in variants {
        let pid = v.replica.pid().unwrap();
        let mut perf = Command::new("perf")
            .args([
                "record",
                "--call-graph",
                "dwarf",
                every,
                period,
                "-e",
                &event,
                "-o",
            ])
            .arg(format!("{prefix}-{}.data", v.label))
            .args(["-p", &pid.to_string(), "--", "sleep", &secs.to_string()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        wrk(
            v.replica.port,
            (conns, threads),
            secs,
            &round_load(v, usize::MAX),
        );
        perf.wait().unwrap();
    }
}

/// Each variant's medians over the rounds, its last VmHWM and its CPU per round.
pub fn medians(o: &Options, variants: &[Variant]) {
    let (rounds, secs, conns, threads) = (o.rounds, o.secs, o.conns, o.threads);
    println!(
        "\nmedians over {rounds} rounds ({secs} s, {conns} connections, {threads} wrk threads, postgres {}, {}):",
        match o.pg {
            Pg::Off => "off",
            Pg::On => "on",
            Pg::Durable => "durable",
        },
        if o.replay {
            "replays"
        } else {
            "first executions"
        }
    );
    for v in variants {
        println!(
            "{:>10}: {}  VmHWM {:>5.1} MiB (last round)  (cpu per round: {})",
            v.label,
            Row::median(&v.rows).figures(),
            v.rows.last().map(|r| r.hwm).unwrap_or(0.0),
            v.rows
                .iter()
                .map(|r| format!("{:.1}", r.cpu_us))
                .collect::<Vec<_>>()
                .join(" / ")
        );
    }
}

/// What each variant's claims came to (vouched claims' verdicts) and its Postgres
/// statements by kind, over the whole run, warm-up included.
pub fn claim_and_statement_counts(variants: &[Variant]) {
    for v in variants {
        let out = Command::new("curl")
            .args([
                "-s",
                &format!("http://127.0.0.1:{}/metrics", v.replica.admin),
            ])
            .output()
            .expect("curl");
        let metrics = String::from_utf8_lossy(&out.stdout);
        let counts: Vec<&str> = (metrics.lines())
            .filter(|l| {
                l.starts_with("idemgate_claim_vouch_total{")
                    || l.starts_with("idemgate_postgres_duration_seconds_count{")
            })
            .collect();
        println!("{:>10}: {}", v.label, counts.join("  "));
    }
}
