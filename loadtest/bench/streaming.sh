#!/usr/bin/env bash
# `make bench-streaming`: keyed streaming answers (Server-Sent Events) through idemgate,
# side by side with the demo upstream answered directly: time to first event for first
# executions, joiners and replays, and CPU and peak RSS per replica for many streams at
# once, with and without slow joiners (loadtest/bench/streaming.py says what and how).
#
# Installs what is missing (Redis, Postgres: .ci/install-deps.sh bench), builds the
# release binaries, then runs loadtest/bench/streaming.py, which has the bench's launcher
# (`idemgate-fleet bench`, fleet/src/bench/) start and stop everything it measures on
# loopback, on the ports of `make bench` (18000, 18011-18014, 18021-18024, 16390,
# 15490: not at the same time as `make bench`), and writes loadtest/bench/results/
# streaming.md (the section between its markers) and streaming.json.
#
# Bounded: the measurement is stopped after BENCH_TIMEOUT seconds (default 900 plus
# QUIET_WAIT; the build before it is not counted); every process started is stopped on
# exit, failure, Ctrl-C or SIGTERM (`idemgate-fleet bench down` in
# loadtest/bounded-run.sh's trap, plus streaming.py's own cleanup).
#
# `python3 loadtest/bench/streaming.py --render` redoes the section from streaming.json.
#
# Environment (all optional; the figures' defaults):
#   NO_BUILD=1                       skip `cargo build --release --bins`
#   IDEMGATE_BIN, UPSTREAM_BIN, FLEET_BIN   binaries (default target/release/...)
#   STREAM_POSTGRES=0                Redis only (default: Redis + Postgres, write-through)
#   TOKENS=20 TOKEN_MS=100           the time-to-first-event streams
#   TTFB_ROUNDS=5 TTFB_STREAMS=5     rounds, and streams of each path at once per round
#   JOIN_DELAY_MS=500                when a joiner is sent after its first
#   CONC_STREAMS=1000 CONC_ROUNDS=3  streams at once, rounds of each variant
#   CONC_TOKENS=20 CONC_TOKEN_MS=250 CONC_RAMP_S=1 CONC_SLACK_S=20
#   SLOW_JOINERS=200 SLOW_READ=64 SLOW_PAUSE_MS=200 SLOW_RCVBUF=4096
#   QUIET_WAIT=0                     seconds to wait for the machine to go idle first
#   ONLY=ttfb|many                   one phase (loadtest/bench/results/ is then left alone)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-$((900 + ${QUIET_WAIT:-0}))}"
cd "$ROOT"

# shellcheck source=loadtest/bounded-run.sh
source "$ROOT/loadtest/bounded-run.sh"

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null ||
    [[ ! -x /usr/lib/postgresql/15/bin/initdb ]]; then
    bash "$ROOT/.ci/install-deps.sh" bench
fi
if [[ ${NO_BUILD:-0} != 1 ]]; then
    printf '==> building release binaries\n'
    cargo build --release --bins
fi
FLEET="${FLEET_BIN:-$ROOT/target/release/idemgate-fleet}"
[[ -x $FLEET ]] || {
    printf 'error: %s missing: run cargo build --release --bins\n' "$FLEET" >&2
    exit 1
}
mkdir -p "$ROOT/.state/bench"
bounded_run "$BENCH_TIMEOUT" bench-streaming "$FLEET" bench down -- python3 "$ROOT/loadtest/bench/streaming.py"
