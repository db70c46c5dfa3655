#!/usr/bin/env python3
"""`make soak` (run by loadtest/soak/run.sh): SOAK_MINUTES of mixed first executions and
replays at a fixed rate through HAProxy to two gateway replicas with the durable
defaults (vouched claims, looked up when cold), a short ttl so the reaper deletes records
during the run, a records table that already holds SOAK_RECORDS records (10 million;
they outlive the run), and a Redis whose warmth markers are older than that ttl.

The launcher (`idemgate-fleet soak start|down`, fleet/src/bench/soak.rs) starts and
stops every process; k6 (loadtest/soak/soak.js) sends the load and checks every answer.
Every SOAK_INTERVAL seconds this samples: RSS per replica, p50/p99 of the interval (k6
streams every request's duration and every first execution into a pipe, read here), the
CPU per first execution of the replicas, Redis and Postgres (the interval's CPU of each,
replays included, over its first executions), the records table's size,
its live and dead tuples and autovacuum runs, the reaper's deletions (the replicas'
`idemgate_reaped_total`), Redis used_memory and keys. Writes loadtest/soak/results/:
series.csv, results.json, soak.png and summary.md (a table of the series at a few
times, a verdict per series by the rule in FLAT_RULE, and the answers checked).

Environment: SOAK_MINUTES (30), SOAK_RATE (300 req/s), SOAK_INTERVAL (15 s),
SOAK_FIRST_PCT (70), SOAK_TTL (3m, the records' ttl), SOAK_REAP_INTERVAL (30s),
SOAK_RECORDS (10000000; 0 starts the table empty), SOAK_REDIS_FILL (the replicas'
`postgres.redis_fill`; unset: the default), FLEET_BIN (target/release/idemgate-fleet), SOAK_RESULTS (loadtest/soak/results).
`python3 loadtest/soak/soak.py --render` redoes the PNG and summary from results.json.
"""

import csv
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "bench"))
import soak_report  # noqa: E402  (loadtest/soak/soak_report.py)
from bench import children_of, cpu_of  # noqa: E402  (loadtest/bench/bench.py: CPU per process)

ROOT = Path(__file__).resolve().parents[2]
FLEET = Path(os.environ.get("FLEET_BIN", ROOT / "target/release/idemgate-fleet"))
OUT = Path(os.environ.get("SOAK_RESULTS", ROOT / "loadtest/soak/results"))
STATE = ROOT / ".state/soak"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
MINUTES = float(os.environ.get("SOAK_MINUTES", "30"))
RATE = int(os.environ.get("SOAK_RATE", "300"))
INTERVAL = float(os.environ.get("SOAK_INTERVAL", "15"))
FIRST_PCT = int(os.environ.get("SOAK_FIRST_PCT", "70"))
TTL = os.environ.get("SOAK_TTL", "3m")
REAP_INTERVAL = os.environ.get("SOAK_REAP_INTERVAL", "30s")
RECORDS = int(os.environ.get("SOAK_RECORDS", "10000000"))
REDIS_FILL = os.environ.get("SOAK_REDIS_FILL", "")
COLUMNS = ["t_s", "rps", "firsts", "p50_ms", "p99_ms", "cpu_gw_us", "cpu_redis_us", "cpu_pg_us", "rss_gw1_mb",
           "rss_gw2_mb", "pg_table_mb", "pg_indexes_mb", "n_live_tup", "n_dead_tup", "autovacuum_count",
           "last_autovacuum", "reaped_total", "redis_used_mb", "redis_keys"]


def log(msg):
    print(f"==> {msg}", flush=True)


def ttl_seconds(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", text.strip())
    if not m:
        sys.exit(f"SOAK_TTL must look like 3m, 180s or 1h (got {text!r})")
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def fleet(*args):
    env = dict(os.environ, SOAK_TTL=TTL, SOAK_REAP_INTERVAL=REAP_INTERVAL, SOAK_RECORDS=str(RECORDS),
               SOAK_REDIS_FILL=REDIS_FILL)
    r = subprocess.run([str(FLEET), "soak", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"idemgate-fleet soak {' '.join(args)} failed (logs in {STATE}/raw)")
    return json.loads(r.stdout.strip().splitlines()[-1])


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def psql(port, sql):
    return subprocess.run([str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                           "-At", "-F", ",", "-c", sql], capture_output=True, text=True, check=True).stdout.strip()


def rss_mb(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def with_children(pid):
    """CPU seconds so far of a process and of every child it ran: its living children
    listed, and the ones it reaped in its own cutime + cstime (bench.cpu_of)."""
    return cpu_of([pid, *children_of(pid)])


def cpu(pids):
    """CPU seconds so far of the replicas (both), Redis (the primary and its replica,
    with their AOF rewrites) and Postgres (the postmaster and every child, living or
    exited)."""
    redis = [pids[n] for n in ("redis", "redis-replica") if n in pids]
    return {"gw": cpu_of([pids["gw-1"], pids["gw-2"]]),
            "redis": sum(with_children(p) for p in redis),
            "pg": with_children(pids["postgres"])}


def reaped(ports):
    total = 0.0
    for p in ports["admins"]:
        for line in http_get(f"http://127.0.0.1:{p}/metrics").splitlines():
            if line.startswith("idemgate_reaped_total"):
                total += float(line.split()[-1])
    return total


def redis_info(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "memory"], capture_output=True, text=True).stdout
    used = int(re.search(r"^used_memory:(\d+)", out, re.M).group(1))
    keys = int(subprocess.run(["redis-cli", "-p", str(port), "DBSIZE"], capture_output=True,
                              text=True).stdout.strip())
    return used / 2**20, keys


PG_SQL = ("select pg_table_size('idemgate_records'), pg_indexes_size('idemgate_records'), n_live_tup, "
          "n_dead_tup, autovacuum_count, coalesce(to_char(last_autovacuum, 'HH24:MI:SS'), '') "
          "from pg_stat_user_tables where relname = 'idemgate_records'")


class Durations:
    """Reads k6's CSV stream (a named pipe) and keeps the request durations and the count
    of first executions since the last take()."""

    def __init__(self, fifo):
        self.fifo, self.lock, self.values, self.firsts = fifo, threading.Lock(), [], 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        with open(self.fifo, newline="") as f:
            for row in csv.reader(f):
                if row and row[0] == "http_req_duration":
                    with self.lock:
                        self.values.append(float(row[2]))
                elif row and row[0] == "soak_firsts":
                    with self.lock:
                        self.firsts += int(float(row[2]))

    def take(self):
        """(durations, first executions) since the last take()."""
        with self.lock:
            v, self.values = self.values, []
            n, self.firsts = self.firsts, 0
        return v, n


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def sample(ports, pids, t, taken, spent):
    """One row of the series: `taken` is (durations, first executions) of the interval,
    `spent` each part's CPU seconds in it."""
    durations, firsts = taken
    size, isize, live, dead, av, last_av = psql(ports["postgres"], PG_SQL).split(",")
    used, keys = redis_info(ports["redis"])

    def per_first(part):
        return round(spent[part] / firsts * 1e6, 1) if firsts else float("nan")

    return {"t_s": round(t, 1), "rps": round(len(durations) / INTERVAL, 1), "firsts": firsts,
            "p50_ms": round(pct(durations, 0.5), 2), "p99_ms": round(pct(durations, 0.99), 2),
            "cpu_gw_us": per_first("gw"), "cpu_redis_us": per_first("redis"), "cpu_pg_us": per_first("pg"),
            "rss_gw1_mb": round(rss_mb(pids["gw-1"]), 1), "rss_gw2_mb": round(rss_mb(pids["gw-2"]), 1),
            "pg_table_mb": round(int(size) / 2**20, 2), "pg_indexes_mb": round(int(isize) / 2**20, 2),
            "n_live_tup": int(live), "n_dead_tup": int(dead), "autovacuum_count": int(av),
            "last_autovacuum": last_av, "reaped_total": int(reaped(ports)),
            "redis_used_mb": round(used, 2), "redis_keys": keys}


def wait_for_table(port, deadline_s=30):
    end = time.time() + deadline_s
    while time.time() < end:
        if psql(port, "select count(*) from pg_stat_user_tables where relname = 'idemgate_records'") == "1":
            return
        time.sleep(0.5)
    raise RuntimeError("the replicas did not create idemgate_records")


def run_load(ports):
    """Starts k6 and samples until it ends; returns the series and k6's counters."""
    fifo = STATE / "k6-stream.csv"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    counters = STATE / "k6-summary.json"
    counters.unlink(missing_ok=True)
    ttl = ttl_seconds(TTL)
    env = dict(os.environ, TARGET=f"http://127.0.0.1:{ports['haproxy']}", RATE=str(RATE),
               DURATION=f"{int(MINUTES * 60)}s", PREFIX=f"soak{int(time.time())}", FIRST_PCT=str(FIRST_PCT),
               REPLAY_MIN_S="5", REPLAY_MAX_S=str(max(10, ttl - 60)), OUT=str(counters), K6_NO_USAGE_REPORT="true")
    k6 = subprocess.Popen(["k6", "run", "--quiet", "--no-color", "--out", f"csv={fifo}",
                           str(ROOT / "loadtest/soak/soak.js")], env=env, cwd=STATE,
                          stdout=open(STATE / "k6.log", "w"), stderr=subprocess.STDOUT)
    durations = Durations(fifo)
    pids = fleet("ps")
    series, start, before = [], time.time(), cpu(pids)
    try:
        next_at = start + INTERVAL
        while k6.poll() is None:
            time.sleep(max(0.0, min(1.0, next_at - time.time())))
            if time.time() >= next_at:
                taken, now = durations.take(), cpu(pids)
                spent = {k: now[k] - before[k] for k in now}
                series.append(sample(ports, pids, time.time() - start, taken, spent))
                before = now
                s = series[-1]
                log(f"t={s['t_s']:>6.0f}s rps={s['rps']} p50={s['p50_ms']} p99={s['p99_ms']} ms "
                    f"cpu/first gw={s['cpu_gw_us']} redis={s['cpu_redis_us']} pg={s['cpu_pg_us']} us "
                    f"rss={s['rss_gw1_mb']}/{s['rss_gw2_mb']} MB table={s['pg_table_mb']}+{s['pg_indexes_mb']} MB "
                    f"live={s['n_live_tup']} dead={s['n_dead_tup']} autovac={s['autovacuum_count']} "
                    f"reaped={s['reaped_total']} redis={s['redis_used_mb']} MB/{s['redis_keys']} keys")
                next_at += INTERVAL
    finally:
        if k6.poll() is None:
            k6.terminate()
            k6.wait(10)
    durations.thread.join(10)
    if k6.returncode not in (0, 99):  # 99: a threshold crossed (none set)
        raise RuntimeError(f"k6 failed ({k6.returncode}); see {STATE}/k6.log")
    return series, json.loads(counters.read_text())


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(),
            "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}


def commit():
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+dirty" if dirty else "")


def main():
    if "--render" in sys.argv:
        soak_report.render(json.loads((OUT / "results.json").read_text()), OUT)
        return
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    STATE.mkdir(parents=True, exist_ok=True)
    log(f"starting the soak fleet (idemgate-fleet soak start): {RECORDS:,} records in the table, ttl {TTL}, "
        f"reaper every {REAP_INTERVAL}, redis_fill {REDIS_FILL or 'default'}")
    try:
        fleet("down")
        fleet("start")
        ports = fleet("ports")
        wait_for_table(ports["postgres"])
        log(f"soak: {MINUTES:g} min at {RATE} req/s ({FIRST_PCT}% first executions, the rest replays), "
            f"a sample every {INTERVAL:g} s; records expire after {TTL} and the reaper deletes them "
            f"every {REAP_INTERVAL}")
        upstream = f"http://127.0.0.1:{ports['upstream']}"
        series, k6 = run_load(ports)
        ledger = json.loads(http_get(f"{upstream}/_demo/executions", timeout=60))
    finally:
        log("stopping the soak fleet (idemgate-fleet soak down)")
        fleet("down")
    results = {"machine": machine(), "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "settings": {"minutes": MINUTES, "rate": RATE, "interval_s": INTERVAL, "first_pct": FIRST_PCT,
                            "ttl": TTL, "reap_interval": REAP_INTERVAL, "replicas": 2, "records": RECORDS,
                            "claims": "vouched, lookup when_cold (defaults)",
                            "redis_fill": REDIS_FILL or "on_replay (the default with vouched claims)",
                            "redis_warmth": "markers backdated 2 days"},
               "k6": k6, "upstream": {"executions": ledger["total"], "duplicates": ledger["duplicates"]},
               "series": series}
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "series.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(series)
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    ok = soak_report.render(results, OUT)
    print((OUT / "summary.md").read_text())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
