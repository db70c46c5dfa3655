//! Side-by-side CPU cost of first executions for gateway variants.
//!
//! Starts Redis, Postgres (the launcher's test cluster: fsync off) and the demo upstream
//! on free loopback ports, then one replica per variant, all at once. Rounds are
//! interleaved, each starting one variant later than the one before (A B, B A, A B, ...:
//! with two variants and an even `--rounds`, each goes first as often as the other; with
//! three, the order turns but B still follows A in two rounds of three): each round
//! sends first executions (a fresh key per request) with `wrk` to one variant for a
//! fixed time and reads that replica's CPU time, context switches and syscalls with
//! `perf stat -p` for the same window, and Redis' CPU (`INFO cpu`) and syscalls over the
//! round. Printed
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
//! write-through and lookup statements per request. `--pg durable`: that Postgres keeps
//! its commits (fsync on), as `make bench`'s does, so a commit costs what it does there.
//!
//! ```sh
//! cargo run -p idemgate-fleet --example cpu_ab -- \
//!     --rounds 5 --secs 4 --conns 16 --pg on \
//!     A=target/release/idemgate B=/tmp/idemgate-b 'C=target/release/idemgate|IDEMGATE__X__Y=z'
//! ```
//! A variant is `LABEL=BINARY`, optionally followed by `|KEY=VALUE` environment entries.

mod fleet;
mod options;
mod report;
mod rounds;
mod row;

use std::path::Path;

use idemgate_fleet::probe::wrk_json;
use idemgate_fleet::Replica;

use fleet::{redis_cpu, Services};
use options::Options;
use rounds::Rounds;
use row::Row;

/// One gateway variant: its replica, its measured load and its rounds' figures.
pub struct Variant {
    pub label: String,
    pub replica: Replica,
    /// The `wrk` arguments of a measured round: `unique PREFIX` (first executions), or
    /// with `--replay`, `replay PREFIX N` over the keys the warm-up stored.
    pub load: Vec<String>,
    pub rows: Vec<Row>,
}

fn main() {
    let o = Options::parse();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let services = Services::start(&o, &root);
    let mut variants = fleet::start_variants(&o.specs, &services);
    fleet::warm_up(&mut variants, &o);
    let lua = root.join("loadtest/bench/wrk.lua");
    assert!(lua.exists());
    // Redis' own cost per request over the measured rounds (all variants together):
    // `INFO commandstats` (µs per script call) and `INFO cpu` (the whole server).
    services.redis.cli(&["CONFIG", "RESETSTAT"]);
    let redis_cpu_before = redis_cpu(&services.redis_info_cpu());
    let rounds = Rounds {
        o: &o,
        s: &services,
        redis_pid: services.redis.info("process_id").expect("redis pid"),
        extra: std::env::var("CPU_AB_EVENTS").unwrap_or_default(),
    };
    rounds.run(&mut variants);
    report::redis_cost(&services, &variants, redis_cpu_before);
    if let Some(prefix) = &o.record {
        report::record(prefix, &variants, &o);
    }
    report::medians(&o, &variants);
    report::claim_and_statement_counts(&variants);
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
