"""The report of `make soak` (loadtest/soak/soak.py): soak.png (one panel per series over
time) and summary.md (the series at the start, every 5 minutes and the end; a verdict per
series by FLAT_RULE; the answers checked), from the results dict soak.py writes to
results.json. `render` returns whether every answer checked out."""

import math
import statistics
from pathlib import Path

FLAT_RULE = ("judged on the steady part of the run, from the reaper's first deletion plus two reaper "
             "intervals on (before it the table and Redis fill up: the reaper may delete a record's row only once its "
             "ttl is over counted from the latest its first execution could complete); split in thirds, a series does not grow when "
             "the median of the last third is at most TOL above the median of the middle third, and the "
             "least-squares slope over the last two thirds, projected over one hour, stays under 2 x TOL of "
             "that median (a soak looks for growth: a series that falls passes, and says so); dead tuples, a "
             "sawtooth that each autovacuum cuts, are judged on each third's peak instead of its median; "
             "the table's and indexes' size and live tuples are judged on what the run added to the first "
             "sample (the seeded records, which outlive the run, would otherwise hide any growth in TOL); "
             "TOL is 10% for memory, sizes and keys, 25% for latency, CPU and dead tuples (noisy on a "
             "shared machine), with an absolute floor (the last column) below which a difference is noise")
# column, label, unit, TOL, absolute floor, how: "median", "peak" (a sawtooth: each third's
# peak) or "added" (the median of what the run added to the first sample)
JUDGED = [
    ("rss_gw1_mb", "RSS replica 1", "MB", 0.10, 2.0, "median"),
    ("rss_gw2_mb", "RSS replica 2", "MB", 0.10, 2.0, "median"),
    ("p50_ms", "p50 of the interval", "ms", 0.25, 1.0, "median"),
    ("p99_ms", "p99 of the interval", "ms", 0.25, 1.0, "median"),
    ("cpu_gw_us", "replicas' CPU per first execution", "µs", 0.25, 20.0, "median"),
    ("cpu_redis_us", "Redis CPU per first execution", "µs", 0.25, 10.0, "median"),
    ("cpu_pg_us", "Postgres CPU per first execution", "µs", 0.25, 20.0, "median"),
    ("pg_table_mb", "records table size, added", "MB", 0.10, 1.0, "added"),
    ("pg_indexes_mb", "records indexes size, added", "MB", 0.10, 1.0, "added"),
    ("n_live_tup", "live tuples, added", "", 0.10, 5000, "added"),
    ("n_dead_tup", "dead tuples (peak)", "", 0.25, 5000, "peak"),
    ("redis_used_mb", "Redis used_memory", "MB", 0.10, 2.0, "median"),
    ("redis_keys", "Redis keys", "", 0.10, 1000, "median"),
]
PANELS = [
    ("RSS per replica (MB)", ["rss_gw1_mb", "rss_gw2_mb"]),
    ("latency of the interval (ms)", ["p50_ms", "p99_ms"]),
    ("CPU per first execution (µs, replays included)", ["cpu_gw_us", "cpu_redis_us", "cpu_pg_us"]),
    ("answered req/s", ["rps"]),
    ("idemgate_records size (MB)", ["pg_table_mb", "pg_indexes_mb"]),
    ("live tuples (estimate)", ["n_live_tup"]),
    ("dead tuples", ["n_dead_tup"]),
    ("autovacuum runs (count)", ["autovacuum_count"]),
    ("records reaped (total, both replicas)", ["reaped_total"]),
    ("Redis used_memory (MB)", ["redis_used_mb"]),
    ("Redis keys", ["redis_keys"]),
]


def slope_per_hour(ts, ys):
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    return 0.0 if var == 0 else sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var * 3600


def seconds(text):
    n, unit = int(text.rstrip("mshd")), text.lstrip("0123456789")
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def steady(r):
    """The samples from the reaper's first deletion plus two reaper intervals on (from
    one ttl plus two intervals if it deleted nothing)."""
    s = r["settings"]
    first = next((float(x["t_s"]) for x in r["series"] if int(x["reaped_total"]) > 0), seconds(s["ttl"]))
    start = first + 2 * seconds(s["reap_interval"])
    return [x for x in r["series"] if float(x["t_s"]) >= start], start


def verdict(series, col, tol, floor, how, base=0.0):
    """(verdict, middle, last, slope per hour) for one column: the verdict is "flat",
    "does not grow: falls" or "**grows**" (None when the run is too short or did not
    record the column); middle and last are the thirds' medians, their peaks for
    how="peak", or their medians less `base` for how="added"."""
    rows = [r for r in series if col in r and not math.isnan(float(r[col]))]
    third = len(rows) // 3
    if third < 2:
        return None, None, None, None
    stat = max if how == "peak" else statistics.median
    base = base if how == "added" else 0.0
    middle = stat(float(r[col]) for r in rows[third:2 * third]) - base
    last = stat(float(r[col]) for r in rows[2 * third:]) - base
    tail = rows[third:]
    slope = slope_per_hour([float(r["t_s"]) for r in tail], [float(r[col]) for r in tail])
    if how == "peak":  # its trend is the peaks', not the samples'
        slope = (last - middle) / ((float(tail[-1]["t_s"]) - float(tail[0]["t_s"])) / 2) * 3600
    within = max(tol * abs(middle), floor)
    if last - middle > within or slope > max(2 * tol * abs(middle), floor):
        return "**grows**", middle, last, slope
    return ("flat" if abs(last - middle) <= within else "does not grow: falls"), middle, last, slope


def plot(series, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(4, 3, figsize=(15, 13), sharex=True)
    ts = [float(r["t_s"]) / 60 for r in series]
    for ax in axes.flat[len(PANELS):]:
        ax.set_visible(False)
    for ax, (title, cols) in zip(axes.flat, PANELS):
        present = [c for c in cols if c in series[0]]  # an older run recorded fewer
        for c in present:
            ax.plot(ts, [float(r[c]) for r in series], label=c)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        if len(present) > 1:
            ax.legend(fontsize=8)
    for ax in axes.flat[len(PANELS) - 3:len(PANELS)]:
        ax.set_xlabel("minutes")
        ax.xaxis.set_tick_params(labelbottom=True)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def checks(r):
    k, up = r["k6"], r["upstream"]
    rows = [
        ("requests answered; not sent on time (k6 had no idle VU: dropped)",
         f"{k['requests']:,}; {k['dropped_iterations']:,}", k["dropped_iterations"] == 0),
        ("5xx answers", f"{k['status_5xx']:,}", k["status_5xx"] == 0),
        ("other non-201 answers, no answer", f"{k['status_other']:,}, {k['no_answer']:,}",
         k["status_other"] == 0 and k["no_answer"] == 0),
        ("first executions: 201 without the replay marker", f"{k['firsts_ok']:,} of {k['firsts']:,}",
         k["firsts_ok"] == k["firsts"]),
        ("replays: 201 with `Idempotent-Replayed: true`", f"{k['replays_ok']:,} of {k['replays']:,}",
         k["replays_ok"] == k["replays"]),
        ("upstream executions (demo-upstream's ledger) = first executions",
         f"{up['executions']:,} = {k['firsts']:,}", up["executions"] == k["firsts"]),
        ("keys executed more than once", f"{up['duplicates']:,}", up["duplicates"] == 0),
    ]
    return rows, all(ok for _, _, ok in rows)


def table_rows(series):
    """Samples at the start, every 5 minutes, and the end."""
    picked, mark = [], 0.0
    for r in series:
        if float(r["t_s"]) >= mark:
            picked.append(r)
            mark = (float(r["t_s"]) // 300 + 1) * 300
    if series and picked[-1] is not series[-1]:
        picked.append(series[-1])
    return picked


def summary(r):
    s, series = r["settings"], r["series"]
    fill = s.get("redis_fill", "at_completion (default)")
    records = s.get("records", 0)
    out = [f"# Soak: {s['minutes']:g} minutes of the durable default"
           + ("" if fill.endswith("(default)") else f", `redis_fill = \"{fill}\"`"),
           "",
           f"Generated by `make soak` (loadtest/soak/soak.py) on {r['date']}, commit `{r['commit']}`, "
           f"{r['machine']['cpu']} ({r['machine']['cpus']} CPUs, {r['machine']['mem_gb']} GB; shared with "
           f"other work, so latency is noisy). {s['rate']} req/s (k6, constant arrival rate) through HAProxy "
           f"to {s['replicas']} replicas with `[postgres]`, claims {s['claims']} and `redis_fill` {fill}, "
           f"over a records table that held {records:,} records before the run (they outlive it); "
           f"{s['first_pct']}% first "
           f"executions (fresh keys), the rest replays of keys stored 5 s to one ttl minus a minute earlier. "
           f"Records expire after `ttl = \"{s['ttl']}\"` and the reaper runs every {s['reap_interval']}: "
           f"the reaper deleted {series[-1]['reaped_total']:,} records during the run. Redis: AOF `always` "
           f"and one replica (as the durable default relies on it), warmth markers older than the ttl (the "
           f"state production runs in). A sample every {s['interval_s']:g} s "
           f"(series.csv).",
           "",
           "![the soak's series over time](soak.png)",
           "",
           "CPU per first execution is the interval's CPU of each process (replays included) over its first "
           "executions: the replicas' together, Redis' (the primary and its replica, with their AOF rewrites), "
           "and Postgres' (the postmaster and every backend and worker, exited ones too).",
           "",
           "| min | req/s | p50 ms | p99 ms | CPU µs gw | CPU µs Redis | CPU µs PG | RSS gw-1 MB | RSS gw-2 MB "
           "| table MB | indexes MB | live | dead | autovacuums | reaped | Redis MB | Redis keys |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in table_rows(series):
        out.append(f"| {float(x['t_s']) / 60:.1f} | {x['rps']} | {x['p50_ms']} | {x['p99_ms']} "
                   f"| {x.get('cpu_gw_us', '-')} | {x.get('cpu_redis_us', '-')} | {x.get('cpu_pg_us', '-')} "
                   f"| {x['rss_gw1_mb']} "
                   f"| {x['rss_gw2_mb']} | {x['pg_table_mb']} | {x['pg_indexes_mb']} | {int(x['n_live_tup']):,} "
                   f"| {int(x['n_dead_tup']):,} | {x['autovacuum_count']} | {int(x['reaped_total']):,} "
                   f"| {x['redis_used_mb']} | {int(x['redis_keys']):,} |")
    judged, start = steady(r)
    out += ["", f"Verdict per series: {FLAT_RULE}. Here: the {len(judged)} samples from minute "
            f"{start / 60:g} on.", "",
            "| series | middle third | last third | slope per hour | floor | verdict |",
            "|---|---:|---:|---:|---:|---|"]
    for col, label, unit, tol, floor, how in JUDGED:
        base = float(series[0][col]) if col in series[0] else 0.0
        said, mid, last, slope = verdict(judged, col, tol, floor, how, base)
        if said is None:
            why = "run too short to judge" if col in series[0] else "not recorded by this run"
            out.append(f"| {label} | - | - | - | {floor:g} | {why} |")
            continue
        u = f" {unit}" if unit else ""
        out.append(f"| {label} | {mid:,.2f}{u} | {last:,.2f}{u} | {slope:+,.2f}{u}/h | {floor:g} "
                   f"| {said} (TOL {tol:.0%}) |")
    av = [int(x["autovacuum_count"]) for x in series]
    out += ["", f"Autovacuum ran {av[-1] - av[0]} times on idemgate_records during the run "
            f"(last at {series[-1]['last_autovacuum'] or 'never'} UTC).", "", "Answers checked:", "",
            "| check | value | ok |", "|---|---:|---|"]
    rows, ok = checks(r)
    out += [f"| {name} | {value} | {'yes' if good else '**no**'} |" for name, value, good in rows]
    out += ["", f"k6 over the whole run: p50 {r['k6']['p50_ms']:.2f} ms, p99 {r['k6']['p99_ms']:.2f} ms, "
            f"max {r['k6']['max_ms']:.1f} ms.", ""]
    return "\n".join(out), ok


def render(r, out_dir):
    out_dir = Path(out_dir)
    plot(r["series"], out_dir / "soak.png")
    text, ok = summary(r)
    (out_dir / "summary.md").write_text(text)
    return ok
