//! Side-by-side CPU cost of first executions for gateway variants.
//!
//! Starts Redis, Postgres (the launcher's test cluster: fsync off) and the demo upstream
//! on free loopback ports, then one replica per variant, all at once. Rounds are
//! interleaved (A, B, A, B, ...): each round sends first executions (a fresh key per
//! request) with `wrk` to one variant for a fixed time and reads that replica's CPU
//! time, context switches and syscalls with `perf stat -p` for the same window, and Redis'
//! CPU (`INFO cpu`) and syscalls over the round. Printed
//! per variant: requests, req/s, and per request the gateway's CPU µs, context
//! switches and syscalls, Redis' CPU µs and syscalls; the median over rounds last.
//! `--replay`: the rounds replay the keys each variant's warm-up stored instead
//! (to check that a change for first executions does not cost replays; add
//! `|IDEMGATE__REPLAY_CACHE__MAX_BYTES=0` to a variant for replays from Redis).
//! `CPU_AB_EVENTS=ev1,ev2` adds perf events of the gateway, printed per request per
//! round (e.g. `syscalls:sys_enter_writev`). Wall-clock req/s on this shared
//! machine is noise; CPU per request is the comparable figure.
//!
//! `--threads N`: wrk threads of the measured rounds (default 1; `make bench` uses 2).
//! Also per round: the machine's idle cores, and with `--pg on` Postgres' CPU and its
//! write-through and lookup statements per request.
//!
//! ```sh
//! cargo run -p idemgate-fleet --example cpu_ab -- \
//!     --rounds 5 --secs 4 --conns 16 --pg on \
//!     A=target/release/idemgate B=/tmp/idemgate-b 'C=target/release/idemgate|IDEMGATE__X__Y=z'
//! ```
//! A variant is `LABEL=BINARY`, optionally followed by `|KEY=VALUE` environment entries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemgate_fleet::probe::{machine_cpu, memory_mib, pg_cpu, pg_statements, wrk_json};
use idemgate_fleet::{free_port, http_status, PgServer, RedisServer, Replica, Upstream};

struct Variant {
    label: String,
    replica: Replica,
    /// The `wrk` arguments of a measured round: `unique PREFIX` (first executions), or
    /// with `--replay`, `replay PREFIX N` over the keys the warm-up stored.
    load: Vec<String>,
    rows: Vec<Row>,
}

#[derive(Clone, Copy)]
struct Row {
    requests: f64,
    rps: f64,
    /// wrk's median and 99th percentile latency, µs.
    p50: f64,
    p99: f64,
    cpu_us: f64,
    cs: f64,
    syscalls: f64,
    /// Redis' CPU (`INFO cpu`, user + sys) during the round, per request.
    redis_us: f64,
    /// Redis' syscalls (`perf stat -p` of redis-server) during the round, per request.
    redis_sc: f64,
    /// The machine's idle cores during the round.
    idle: f64,
    /// Postgres write-through and lookup statements per request (the replica's
    /// `idemgate_postgres_duration_seconds_count`), and Postgres' CPU µs per request.
    wt: f64,
    lookups: f64,
    pg_us: f64,
    /// The replica's VmHWM and VmRSS after the round, MiB.
    hwm: f64,
    rss: f64,
}

impl Row {
    /// The per-request figures, as a round's line and the medians' line print them.
    fn figures(&self) -> String {
        format!(
            "{:>7.0} req/s  p50 {:>6.0} us  p99 {:>6.0} us  cpu {:>6.1} us/req  cs {:>5.2}/req  syscalls {:>5.2}/req  redis {:>5.1} us/req  redis syscalls {:>5.2}/req  idle {:.2} cores  pg write/lookup {:.3}/{:.3} stmt/req  postgres {:>5.1} us/req",
            self.rps, self.p50, self.p99, self.cpu_us, self.cs, self.syscalls, self.redis_us,
            self.redis_sc, self.idle, self.wt, self.lookups, self.pg_us
        )
    }

    /// Each figure's median over `rows` (the upper one of an even count).
    fn median(rows: &[Row]) -> Row {
        let med = |f: fn(&Row) -> f64| {
            let mut xs: Vec<f64> = rows.iter().map(f).collect();
            xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
            xs[xs.len() / 2]
        };
        Row {
            requests: med(|r| r.requests),
            rps: med(|r| r.rps),
            p50: med(|r| r.p50),
            p99: med(|r| r.p99),
            cpu_us: med(|r| r.cpu_us),
            cs: med(|r| r.cs),
            syscalls: med(|r| r.syscalls),
            redis_us: med(|r| r.redis_us),
            redis_sc: med(|r| r.redis_sc),
            idle: med(|r| r.idle),
            wt: med(|r| r.wt),
            lookups: med(|r| r.lookups),
            pg_us: med(|r| r.pg_us),
            hwm: med(|r| r.hwm),
            rss: med(|r| r.rss),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut rounds, mut secs, mut conns, mut pg_on) = (5usize, 4u64, 16usize, true);
    // wrk's threads (`-t`) in the measured rounds: `make bench` runs 2.
    let mut threads = 1usize;
    let mut record: Option<String> = None;
    let mut callgrind = false;
    // `--replay`: rounds replay the keys each variant's warm-up stored (all of them
    // replays but one key), instead of first executions.
    let mut replay = false;
    // `--redis durable`: Redis as vouched claims rely on (AOF fsync'd before every reply)
    // with a replica, whose CPU counts with Redis'.
    let mut durable = false;
    // `--warm`: every warmth marker two days old, as the bench's Redis (a Redis older than
    // the longest ttl): `lookup_on_miss = "when_cold"` then skips the Postgres lookup.
    let mut warm = false;
    let mut specs = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().unwrap().parse().unwrap(),
            "--secs" => secs = args.next().unwrap().parse().unwrap(),
            "--conns" => conns = args.next().unwrap().parse().unwrap(),
            "--pg" => pg_on = args.next().unwrap() == "on",
            "--threads" => threads = args.next().unwrap().parse().unwrap(),
            "--record" => record = args.next(),
            // Variants run under `valgrind --tool=callgrind --callgrind-out-file=DIR/cg.%p`
            // (give a wrapper as the binary): instructions per request, repeatable under load.
            "--callgrind" => callgrind = true,
            "--replay" => replay = true,
            "--redis" => durable = args.next().unwrap() == "durable",
            "--warm" => warm = true,
            _ => specs.push(a),
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let redis = match durable {
        true => RedisServer::start_with(idemgate_fleet::DURABLE_REDIS),
        false => RedisServer::start(),
    };
    let port = redis.port.to_string();
    let replica = durable.then(|| {
        let mut args = idemgate_fleet::DURABLE_REDIS.to_vec();
        args.extend(["--replicaof", "127.0.0.1", &port]);
        RedisServer::start_with(&args)
    });
    if warm {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let since_ms = now.unwrap().as_millis() - 2 * 86_400_000;
        idemgate_fleet::bench::warm::backdate_markers(redis.port, "idemgate", since_ms).unwrap();
    }
    // Redis' CPU: the primary's, and the replica's where there is one.
    let redis_info_cpu = || {
        let mut info = redis.cli(&["INFO", "cpu"]);
        if let Some(r) = &replica {
            info.push_str(&r.cli(&["INFO", "cpu"]));
        }
        info
    };
    let pg = pg_on.then(PgServer::start);
    let upstream = Upstream::start(
        &root.join("target/release/demo-upstream"),
        dir.path(),
        &[("RUST_LOG".into(), "warn".into())],
    );
    let mut variants: Vec<Variant> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut parts = spec.split('|');
            let (label, bin) = parts.next().unwrap().split_once('=').unwrap();
            let env: Vec<(String, String)> = parts
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect();
            let (port, admin) = (free_port(), free_port());
            let config = dir.path().join(format!("gw-{i}.toml"));
            let pg_section = pg.as_ref().map(|p| p.section("")).unwrap_or_default();
            std::fs::write(
                &config,
                format!(
                    "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
                     [log]\nfilter = \"warn\"\n[redis]\nurl = \"{}\"\n{pg_section}\n\
                     [idempotency]\nanonymous = \"shared\"\n\
                     [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n",
                    redis.url(),
                    upstream.url()
                ),
            )
            .unwrap();
            // Environment through a wrapper that execs the binary (same pid).
            let bin = if env.is_empty() {
                PathBuf::from(bin)
            } else {
                let wrapper = dir.path().join(format!("gw-{i}.sh"));
                let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
                let abs = std::fs::canonicalize(bin).unwrap();
                std::fs::write(&wrapper, format!("#!/bin/sh\nexec env {} {} \"$@\"\n", vars.join(" "), abs.display())).unwrap();
                Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
                wrapper
            };
            let mut replica = Replica::new(&bin, i, port, admin, config, dir.path().join(format!("gw-{i}.log")));
            replica.start();
            Variant { label: label.to_string(), replica, load: Vec::new(), rows: Vec::new() }
        })
        .collect();
    for v in variants.iter_mut() {
        let mut ready = false;
        for _ in 0..200 {
            if http_status(v.replica.admin, "/readyz", Duration::from_secs(1)) == Some(200) {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(ready, "{} not ready: {}", v.label, v.replica.log_text());
        let warm = format!("warm-{}", v.label);
        let (stored, _) = wrk(
            v.replica.port,
            (conns, 1),
            1,
            &["unique".into(), warm.clone()],
        );
        // wrk -t1: the warm-up's keys are warm-LABEL-1-1 ..= warm-LABEL-1-<stored>.
        v.load = if replay {
            vec![
                "replay".into(),
                format!("{warm}-1"),
                (stored as u64).to_string(),
            ]
        } else {
            vec!["unique".into()]
        };
    }
    let lua = root.join("loadtest/bench/wrk.lua");
    assert!(lua.exists());
    // Redis' own cost per request over the measured rounds (all variants together):
    // `INFO commandstats` (µs per script call) and `INFO cpu` (the whole server).
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let redis_cpu = |info: &str| -> f64 {
        info.lines()
            .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
            .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
            .sum()
    };
    let redis_cpu_before = redis_cpu(&redis_info_cpu());
    let redis_pid = redis.info("process_id").expect("redis pid");
    // Extra gateway events per request (e.g. `syscalls:sys_enter_writev,...`), printed per round.
    let extra = std::env::var("CPU_AB_EVENTS").unwrap_or_default();
    for round in 0..rounds {
        for v in variants.iter_mut() {
            let pid = v.replica.pid().unwrap();
            if callgrind {
                let ctl = |flag: &str| {
                    let out = Command::new("callgrind_control")
                        .arg(flag)
                        .arg(pid.to_string())
                        .output()
                        .unwrap();
                    String::from_utf8_lossy(&out.stdout).to_string()
                };
                ctl("-z");
                let (requests, rps) = wrk(
                    v.replica.port,
                    (conns, threads),
                    secs,
                    &round_load(v, round),
                );
                let before: Vec<_> = cg_files();
                ctl("-d");
                let dump = cg_files()
                    .into_iter()
                    .find(|f| !before.contains(f))
                    .expect("callgrind dump");
                let text = std::fs::read_to_string(&dump).unwrap();
                let ir: f64 = text
                    .lines()
                    .find_map(|l| l.strip_prefix("totals: "))
                    .and_then(|t| t.split(' ').next())
                    .unwrap()
                    .parse()
                    .unwrap();
                println!("round {round} {:>10}: {:>7.0} req {:>7.0} req/s  {:>9.0} instructions/req ({})", v.label, requests, rps, ir / requests, dump.display());
                v.rows.push(Row {
                    requests,
                    rps,
                    p50: 0.0,
                    p99: 0.0,
                    cpu_us: ir / requests / 1000.0,
                    cs: 0.0,
                    syscalls: 0.0,
                    redis_us: 0.0,
                    redis_sc: 0.0,
                    idle: 0.0,
                    wt: 0.0,
                    lookups: 0.0,
                    pg_us: 0.0,
                    hwm: 0.0,
                    rss: 0.0,
                });
                continue;
            }
            let out = dir.path().join("perf.txt");
            let mut events = "task-clock,context-switches,raw_syscalls:sys_enter".to_string();
            if !extra.is_empty() {
                events = format!("{events},{extra}");
            }
            let mut perf = Command::new("perf")
                .args(["stat", "-x", ",", "-o"])
                .arg(&out)
                .args(["-e", &events, "-p"])
                .arg(pid.to_string())
                .args(["--", "sleep", &(secs + 1).to_string()])
                .spawn()
                .unwrap();
            let redis_out = dir.path().join("perf-redis.txt");
            let mut perf_redis = Command::new("perf")
                .args(["stat", "-x", ",", "-o"])
                .arg(&redis_out)
                .args(["-e", "raw_syscalls:sys_enter", "-p", &redis_pid])
                .args(["--", "sleep", &(secs + 1).to_string()])
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let redis_round = redis_cpu(&redis_info_cpu());
            let statements_before = pg_statements(v.replica.admin);
            let pg_before = pg.as_ref().map_or(0.0, |p| pg_cpu(p.port));
            let cpu_before = machine_cpu();
            let w = wrk_json(
                v.replica.port,
                (conns, threads),
                secs,
                &round_load(v, round),
            );
            let (requests, rps) = (w("requests"), w("rps"));
            let redis_round = redis_cpu(&redis_info_cpu()) - redis_round;
            let statements = pg_statements(v.replica.admin);
            let pg_round = pg.as_ref().map_or(0.0, |p| pg_cpu(p.port)) - pg_before;
            let cpu_after = machine_cpu();
            let idle = (cpu_after.0 - cpu_before.0) / (cpu_after.1 - cpu_before.1) * cpu_after.2;
            // perf's window is 1 s longer than wrk's: the idle tail costs ~nothing.
            perf.wait().unwrap();
            perf_redis.wait().unwrap();
            let text = std::fs::read_to_string(&out).unwrap();
            let redis_text = std::fs::read_to_string(&redis_out).unwrap();
            let count_in = |text: &str, name: &str| {
                text.lines()
                    .find(|l| l.split(',').nth(2) == Some(name))
                    .and_then(|l| l.split(',').next())
                    .and_then(|n| n.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            let counter = |name: &str| count_in(&text, name);
            let (hwm, rss) = memory_mib(pid);
            let row = Row {
                requests,
                rps,
                p50: w("lat_p50_us"),
                p99: w("lat_p99_us"),
                cpu_us: counter("task-clock") * 1000.0 / requests,
                cs: counter("context-switches") / requests,
                syscalls: counter("raw_syscalls:sys_enter") / requests,
                redis_us: redis_round * 1e6 / requests,
                redis_sc: count_in(&redis_text, "raw_syscalls:sys_enter") / requests,
                idle,
                wt: (statements.0 - statements_before.0) / requests,
                lookups: (statements.1 - statements_before.1) / requests,
                pg_us: pg_round * 1e6 / requests,
                hwm,
                rss,
            };
            println!(
                "round {round} {:>10}: {:>7.0} req {}  VmHWM {:>5.1} MiB  VmRSS {:>5.1} MiB",
                v.label,
                row.requests,
                row.figures(),
                row.hwm,
                row.rss
            );
            for event in extra.split(',').filter(|e| !e.is_empty()) {
                println!("    {event}: {:.2}/req", counter(event) / requests);
            }
            v.rows.push(row);
        }
    }
    let redis_cpu_s = redis_cpu(&redis_info_cpu()) - redis_cpu_before;
    let all: f64 = variants
        .iter()
        .flat_map(|v| v.rows.iter())
        .map(|r| r.requests)
        .sum();
    println!(
        "\nredis over the rounds: {:.1} us CPU per request ({all:.0} requests); commandstats:",
        redis_cpu_s * 1e6 / all
    );
    for line in redis.cli(&["INFO", "commandstats"]).lines() {
        if line.starts_with("cmdstat_") {
            println!("  {line}");
        }
    }
    if let Some(prefix) = &record {
        // `perf record` of every variant during one more run each: cpu-clock samples, or
        // the event `CPU_AB_RECORD_EVENT` names (`sched:sched_waking`: who wakes whom).
        let event = std::env::var("CPU_AB_RECORD_EVENT").unwrap_or_else(|_| "cpu-clock".into());
        // A tracepoint fires per event: one stack in 50, not 499 per second.
        let (every, period) = match event.as_str() {
            "cpu-clock" => ("-F", "499"),
            _ => ("-c", "50"),
        };
        for v in &variants {
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
    println!(
        "\nmedians over {rounds} rounds ({secs} s, {conns} connections, {threads} wrk threads, postgres {}, {}):",
        if pg_on { "on" } else { "off" },
        if replay {
            "replays"
        } else {
            "first executions"
        }
    );
    for v in &variants {
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
    // What each variant's claims came to (vouched claims' verdicts) and its Postgres
    // statements by kind, over the whole run, warm-up included.
    for v in &variants {
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

/// Callgrind dumps in $CG_DIR (default /tmp/cg).
fn cg_files() -> Vec<PathBuf> {
    let dir = std::env::var("CG_DIR").unwrap_or_else(|_| "/tmp/cg".into());
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The `wrk` script arguments of `round` for `v`: fresh keys per round, or its replays.
fn round_load(v: &Variant, round: usize) -> Vec<String> {
    match v.load.first().map(String::as_str) {
        Some("replay") => v.load.clone(),
        _ => vec!["unique".into(), format!("r{round}-{}", v.label)],
    }
}

/// `wrk` with `loadtest/bench/wrk.lua` and its `script` arguments (`unique PREFIX` or
/// `replay PREFIX N`) against 127.0.0.1:`port`; (requests, req/s).
fn wrk(port: u16, load: (usize, usize), secs: u64, script: &[String]) -> (f64, f64) {
    let w = wrk_json(port, load, secs, script);
    (w("requests"), w("rps"))
}
