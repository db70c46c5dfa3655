//! One round's figures of one variant, per request, and their medians over the rounds.

/// One round of one variant: its requests and rate, and the costs per request.
#[derive(Clone, Copy)]
pub struct Row {
    pub requests: f64,
    pub rps: f64,
    /// wrk's median and 99th percentile latency, µs.
    pub p50: f64,
    pub p99: f64,
    pub cpu_us: f64,
    pub cs: f64,
    pub syscalls: f64,
    /// Redis' CPU (`INFO cpu`, user + sys) during the round, per request.
    pub redis_us: f64,
    /// Redis' syscalls (`perf stat -p` of redis-server) during the round, per request.
    pub redis_sc: f64,
    /// The machine's idle cores during the round.
    pub idle: f64,
    /// Postgres write-through and lookup statements per request (the replica's
    /// `idemgate_postgres_duration_seconds_count`), and Postgres' CPU µs per request.
    pub wt: f64,
    pub lookups: f64,
    pub pg_us: f64,
    /// The replica's VmHWM and VmRSS after the round, MiB.
    pub hwm: f64,
    pub rss: f64,
}

impl Row {
    /// The per-request figures, as a round's line and the medians' line print them.
    pub fn figures(&self) -> String {
        format!(
            "{:>7.0} req/s  p50 {:>6.0} us  p99 {:>6.0} us  cpu {:>6.1} us/req  cs {:>5.2}/req  syscalls {:>5.2}/req  redis {:>5.1} us/req  redis syscalls {:>5.2}/req  idle {:.2} cores  pg write/lookup {:.3}/{:.3} stmt/req  postgres {:>5.1} us/req",
            self.rps, self.p50, self.p99, self.cpu_us, self.cs, self.syscalls, self.redis_us,
            self.redis_sc, self.idle, self.wt, self.lookups, self.pg_us
        )
    }

    /// Each figure's median over `rows` (the upper one of an even count).
    pub fn median(rows: &[Row]) -> Row {
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
