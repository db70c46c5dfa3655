//! Readings of a running fleet for the A/B examples (`fleet/examples/cpu_ab/`): a
//! process's memory, Postgres' CPU and statement counts, the machine's idle time. Linux
//! only: they read `/proc` (and `curl` for `/metrics`) and panic without them. Also the
//! `wrk` run the examples measure with ([`wrk_json`]).

use std::process::Command;

/// VmHWM and VmRSS of `pid` in MiB (as `make bench` reads peak RSS).
pub fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Postgres write-through and lookup statements the replica has run so far (its
/// `/metrics` on admin port `admin`; zero without Postgres).
pub fn pg_statements(admin: u16) -> (f64, f64) {
    let out = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{admin}/metrics")])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |op: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("idemgate_postgres_duration_seconds_count{"))
            .filter(|l| l.contains(&format!("op=\"{op}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (count("write_through"), count("lookup"))
}

/// CPU seconds used so far by the Postgres listening on `port`: its postmaster (found
/// by its `-p PORT` or `-c port=PORT` argument) and the postmaster's children (backends
/// and workers).
pub fn pg_cpu(port: u16) -> f64 {
    let procs: Vec<(u32, u32, f64)> = (std::fs::read_dir("/proc").unwrap())
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the ")" that ends the command: state, ppid, ... utime (12), stime (13).
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
            Some((pid, fields.get(1)?.parse().ok()?, ticks / 100.0))
        })
        .collect();
    let (port, port_setting) = (port.to_string(), format!("port={port}"));
    let postmaster = procs.iter().map(|p| p.0).find(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        (args.windows(2)).any(|w| {
            (w[0] == b"-p" && w[1] == port.as_bytes())
                || (w[0] == b"-c" && w[1] == port_setting.as_bytes())
        }) && args[0].ends_with(b"postgres")
    });
    let Some(postmaster) = postmaster else {
        return 0.0;
    };
    (procs.iter())
        .filter(|p| p.0 == postmaster || p.1 == postmaster)
        .map(|p| p.2)
        .sum()
}

/// The machine's (idle + iowait, total) jiffies so far and its CPU count (`/proc/stat`).
pub fn machine_cpu() -> (f64, f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let all: Vec<f64> = (stat.lines().next().unwrap().split_whitespace().skip(1))
        .filter_map(|n| n.parse().ok())
        .collect();
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    (all[3] + all[4], all.iter().take(8).sum(), cpus as f64)
}

/// `wrk` with `loadtest/bench/wrk.lua` and its `script` arguments (`unique PREFIX` or
/// `replay PREFIX N`) against 127.0.0.1:`port`, with `(connections, threads)`, for
/// `secs`; its JSON line as a field reader (`requests`, `rps`, `lat_p50_us`, ...).
/// Panics on any non-2xx answer.
pub fn wrk_json(
    port: u16,
    (conns, threads): (usize, usize),
    secs: u64,
    script: &[String],
) -> impl Fn(&str) -> f64 {
    let lua = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../loadtest/bench/wrk.lua");
    let out = std::process::Command::new("wrk")
        .args(["-t", &threads.to_string(), "-c", &conns.to_string()])
        .args(["-d", &format!("{secs}s"), "--timeout", "5s", "-s"])
        .arg(&lua)
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--")
        .args(script)
        .output()
        .expect("wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("wrk: {text}"))
        .to_string();
    let field = move |name: &str| {
        let at = json.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
        json[at..]
            .split([',', '}'])
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(field("err_status"), 0.0, "non-2xx answers");
    field
}
