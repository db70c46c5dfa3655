//! cpu_ab's measured rounds: each variant in turn under `wrk`, measured with `perf stat`
//! (or callgrind's counts), one [`Row`] per variant and round.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use idemgate_fleet::probe::{machine_cpu, memory_mib, pg_cpu, pg_statements, wrk_json};

use crate::fleet::{redis_cpu, Services};
use crate::options::Options;
use crate::row::Row;
use crate::{round_load, wrk, Variant};

/// What every round measures with.
pub struct Rounds<'a> {
    pub o: &'a Options,
    pub s: &'a Services,
    /// redis-server's pid, for `perf stat -p`.
    pub redis_pid: String,
    /// Extra gateway events per request (e.g. `syscalls:sys_enter_writev,...`), printed
    /// per round.
    pub extra: String,
}

impl Rounds<'_> {
    /// Every round, interleaved: each variant in turn, `o.rounds` times. Each round
    /// starts one variant later than the one before (A B, then B A), so that what a
    /// variant leaves behind in a shared server (Postgres' background writes, a table
    /// grown by its rows) is charged to every variant alike over the rounds.
    pub fn run(&self, variants: &mut [Variant]) {
        let n = variants.len();
        for round in 0..self.o.rounds {
            for i in 0..n {
                let v = &mut variants[(round + i) % n];
                let pid = v.replica.pid().unwrap();
                if self.o.callgrind {
                    self.callgrind_round(v, round, pid);
                    continue;
                }
                self.perf_round(v, round, pid);
            }
        }
    }

    /// One round of `v` (pid `pid`) under callgrind: its instructions per request.
    fn callgrind_round(&self, v: &mut Variant, round: usize, pid: u32) {
        let (conns, threads, secs) = (self.o.conns, self.o.threads, self.o.secs);
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
        println!(
            "round {round} {:>10}: {:>7.0} req {:>7.0} req/s  {:>9.0} instructions/req ({})",
            v.label,
            requests,
            rps,
            ir / requests,
            dump.display()
        );
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
    }

    /// One round of `v` (pid `pid`) under `perf stat`, with Redis', Postgres' and the
    /// machine's costs over the same window.
    fn perf_round(&self, v: &mut Variant, round: usize, pid: u32) {
        let (conns, threads, secs) = (self.o.conns, self.o.threads, self.o.secs);
        let (redis_info_cpu, pg) = (|| self.s.redis_info_cpu(), &self.s.pg);
        let out = self.s.dir.path().join("perf.txt");
        let redis_out = self.s.dir.path().join("perf-redis.txt");
        let (mut perf, mut perf_redis) = self.start_perf(pid, &out, &redis_out);
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
        for event in self.extra.split(',').filter(|e| !e.is_empty()) {
            println!("    {event}: {:.2}/req", counter(event) / requests);
        }
        v.rows.push(row);
    }

    /// `perf stat` of the gateway (pid `pid`) into `out` and of Redis' syscalls into
    /// `redis_out`, for a second longer than a round.
    fn start_perf(&self, pid: u32, out: &Path, redis_out: &Path) -> (Child, Child) {
        let secs = self.o.secs;
        let mut events = "task-clock,context-switches,raw_syscalls:sys_enter".to_string();
        if !self.extra.is_empty() {
            events = format!("{events},{}", self.extra);
        }
        let perf = Command::new("perf")
            .args(["stat", "-x", ",", "-o"])
            .arg(out)
            .args(["-e", &events, "-p"])
            .arg(pid.to_string())
            .args(["--", "sleep", &(secs + 1).to_string()])
            .spawn()
            .unwrap();
        let perf_redis = Command::new("perf")
            .args(["stat", "-x", ",", "-o"])
            .arg(redis_out)
            .args(["-e", "raw_syscalls:sys_enter", "-p", &self.redis_pid])
            .args(["--", "sleep", &(secs + 1).to_string()])
            .spawn()
            .unwrap();
        (perf, perf_redis)
    }
}

/// The count of event `name` in `perf stat -x ,` output (NaN when it has none).
fn count_in(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.split(',').nth(2) == Some(name))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(f64::NAN)
}

/// Callgrind dumps in $CG_DIR (default /tmp/cg).
fn cg_files() -> Vec<PathBuf> {
    let dir = std::env::var("CG_DIR").unwrap_or_else(|_| "/tmp/cg".into());
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default()
}
