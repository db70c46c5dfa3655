#!/usr/bin/env bash
# `make test`: every check that proves behaviour, stage by stage, then one summary line.
#   alert rules   promtool check rules + promtool test rules (deploy/prometheus/)
#   deploy        deploy/check.sh (manifests, Dockerfile; its tools once per machine)
#   grpc tools    tests/grpc/setup.sh (grpcio for the gRPC tests; once per machine)
#   cargo test    cargo test --all-targets: unit, integration (tests/it), parsers,
#                 architecture, docs, the fast chaos scenarios
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
cargo_test() {
  cargo test --all-targets --no-fail-fast 2>&1 | tee "$log"
}

stage "alert rules" alert_rules
stage "deploy" bash deploy/check.sh
stage "grpc tools" bash tests/grpc/setup.sh
stage "cargo test" cargo_test

# cargo prints one "test result: ok. 12 passed; 0 failed; 1 ignored; ..." per binary.
read -r passed failed ignored < <(
  sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log" |
    awk '{p += $1; f += $2; i += $3} END {print p + 0, f + 0, i + 0}'
)
echo
echo "test: stages: $(IFS=,; echo "${times[*]}" | sed 's/,/, /g'); $ignored ignored (make chaos runs the slow scenarios)"
echo "test: $passed passed, $failed failed"
exit $status
