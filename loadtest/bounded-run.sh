# shellcheck shell=bash
# Sourced by loadtest/bench/run.sh and loadtest/soak/run.sh: runs one measurement bounded in
# time, and stops everything it started whatever way it ends.
#
# bounded_run LIMIT LABEL DOWN... -- CMD...
#   Runs CMD in the background and waits for it. After LIMIT seconds, or on Ctrl-C or
#   SIGTERM, CMD gets SIGTERM (then SIGKILL after 15 s); in every case DOWN (a command
#   that stops whatever CMD started and left behind, e.g. `idemgate-fleet bench down`)
#   runs before the script exits with CMD's status (130 when interrupted).

_br_pid=""
_br_watchdog=""
_br_down=()

_br_cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    [[ -n $_br_watchdog ]] && kill "$_br_watchdog" 2>/dev/null || true
    if [[ -n $_br_pid ]] && kill -0 "$_br_pid" 2>/dev/null; then
        kill -TERM "$_br_pid" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do
            kill -0 "$_br_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$_br_pid" 2>/dev/null || true
    fi
    printf '==> stopping whatever is left (%s)\n' "${_br_down[*]}"
    "${_br_down[@]}" >/dev/null || true
    exit "$rc"
}

bounded_run() {
    local limit=$1 label=$2
    shift 2
    while [[ $# -gt 0 && $1 != -- ]]; do
        _br_down+=("$1")
        shift
    done
    shift
    trap _br_cleanup EXIT
    trap "echo '$label: interrupted' >&2; exit 130" INT TERM
    (
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        sleep "$limit" &
        sleeper=$!
        wait "$sleeper"
        echo "$label: time limit of ${limit}s reached; stopping" >&2
        kill -TERM $$
    ) &
    _br_watchdog=$!
    "$@" &
    _br_pid=$!
    wait "$_br_pid"
}
