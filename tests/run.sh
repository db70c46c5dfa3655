#!/usr/bin/env bash
# `make test`: every check that proves behaviour, stage by stage, then one summary line.
#   alert rules   promtool check rules + promtool test rules (deploy/prometheus/)
#   deploy        deploy/check.sh (manifests, Dockerfile; its tools once per machine)
#   grpc tools    tests/grpc/setup.sh (grpcio for the gRPC tests; once per machine)
#   cargo test    cargo nextest run (or cargo test) --all-targets, TEST_THREADS at once: unit,
#                 integration, parsers, architecture, docs, the fast chaos scenarios
# The slower gates (cargo deny, the upgrade check, the fuzz smoke) are `make ci`'s.
# The last line is `test: N passed, M failed` (cargo's test counts; ignored ones after),
# the one before it how long each stage took. Exits non-zero when any stage fails.
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
times=()
stage() {
  local name=$1 start
  shift
  start=$(date +%s)
  echo "== test: $name" >&2
  if ! "$@"; then
    status=1
    echo "== test: $name FAILED" >&2
  fi
  times+=("$name $(($(date +%s) - start))s")
}
alert_rules() {
  promtool check rules deploy/prometheus/alerts.yml &&
    promtool test rules deploy/prometheus/alerts_test.yml
}
# Most tests wait on servers and timers rather than compute, so TEST_THREADS of them run
# at once (default 6, chosen on 2 cores: docs/development.md). With cargo-nextest (on
# PATH) they come from one pool across every binary (.config/nextest.toml); without it,
# cargo test runs the binaries one after another. Tests in a `realtime` module assert a
# recovery-time bound that a loaded machine stretches: they run afterwards, one at a time.
cargo_test() {
  local ok=0
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-targets --test-threads "${TEST_THREADS:-6}" \
      -E 'not test(/::realtime::/)' 2>&1 | tee "$log" || ok=1
    cargo nextest run --workspace --all-targets --test-threads 1 \
      -E 'test(/::realtime::/)' 2>&1 | tee -a "$log" || ok=1
  else
    echo "test: cargo-nextest not found, running cargo test (about 2 minutes slower;" \
      "cargo install --locked cargo-nextest)" >&2
    cargo test --all-targets --no-fail-fast -- --test-threads "${TEST_THREADS:-6}" \
      --skip ::realtime:: 2>&1 | tee "$log" || ok=1
    cargo test --all-targets --no-fail-fast -- --test-threads 1 ::realtime:: 2>&1 |
      tee -a "$log" || ok=1
  fi
  return $ok
}

stage "alert rules" alert_rules
stage "deploy" bash deploy/check.sh
stage "grpc tools" bash tests/grpc/setup.sh
stage "cargo test" cargo_test

# cargo test prints "test result: ok. 12 passed; 0 failed; 1 ignored; ..." per binary;
# nextest ends each run with "Summary [ 1.0s] 12 tests run: 11 passed, 1 failed, 3 skipped",
# where the first run's skipped ones are the ignored tests and the realtime ones run second.
read -r passed failed ignored < <(
  if grep -qE '^ *Summary \[' "$log"; then
    grep -E '^ *Summary \[' "$log" |
      awk '{p = f = s = 0; for (i = 1; i <= NF; i++) {
              w = $i; sub(/,$/, "", w)
              if (w == "passed") p = $(i - 1); if (w == "failed") f = $(i - 1); if (w == "skipped") s = $(i - 1)
            } tp += p; tf += f; if (NR == 1) ts = s; else ts -= p + f}
           END {print tp + 0, tf + 0, ts + 0}'
  else
    sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log" |
      awk '{p += $1; f += $2; i += $3} END {print p + 0, f + 0, i + 0}'
  fi
)
echo
echo "test: stages: $(IFS=,; echo "${times[*]}" | sed 's/,/, /g'); $ignored ignored (make chaos runs the slow scenarios)"
echo "test: $passed passed, $failed failed"
exit $status
