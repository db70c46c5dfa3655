#!/usr/bin/env bash
# Start the local idemgate stack on loopback (used by `make up`):
#   redis-server    127.0.0.1:6390   (no persistence, data in .state/redis)
#   demo-upstream   127.0.0.1:3000   (fake payments API, see src/bin/demo-upstream.rs)
#   idemgate        127.0.0.1:8080   (admin/readiness on 127.0.0.1:9090)
# State (pid files, logs) lives in .state/ at the repo root. Safe to run twice:
# a component whose pid file points at a live process is left alone.
# Stop everything with deploy/local/down.sh (`make down`).
#
# Environment:
#   IDEMGATE_CONFIG   gateway config (default deploy/local/idemgate.toml)
#   DEMO_LATENCY, DEMO_FAIL_RATE, DEMO_FAIL_STATUS, DEMO_RESET_RATE
#                     passed through to demo-upstream (see its --help)
#   READY_TIMEOUT     seconds to wait for each component (default 30)
# Ports are fixed to match deploy/local/idemgate.toml.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

REDIS_PORT=6390
UPSTREAM_PORT=3000
GATEWAY_PORT=8080
ADMIN_PORT=9090
CONFIG="${IDEMGATE_CONFIG:-deploy/local/idemgate.toml}"
READY_TIMEOUT="${READY_TIMEOUT:-30}"
STATE="$ROOT/.state"

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# pid_alive PIDFILE: the pid file names a live (non-zombie) process.
pid_alive() {
    local pidfile=$1 pid
    [[ -f $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]]
}

# alive PIDFILE NAME: the pid file names a live (non-zombie) process whose
# program name is NAME (guards against pid reuse).
alive() {
    local pidfile=$1 name=$2 pid argv0
    pid_alive "$pidfile" || return 1
    pid=$(<"$pidfile")
    argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || return 1
    argv0=${argv0%% *}
    [[ ${argv0##*/} == "$name" ]]
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

install_pkg() {
    local pkg=$1
    log "installing $pkg via apt-get"
    if ! apt-cache show "$pkg" >/dev/null 2>&1 ||
        [[ -z "$(apt-cache policy "$pkg" | awk '/Candidate:/ && $2 != "(none)" {print $2}')" ]]; then
        as_root apt-get update
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$pkg"
}

# start NAME PIDFILE LOGFILE PORT CMD...: start CMD in the background unless
# it is already running.
start() {
    local name=$1 pidfile=$2 logfile=$3 port=$4
    shift 4
    if alive "$pidfile" "$name"; then
        log "$name already running (pid $(<"$pidfile"))"
        return 0
    fi
    rm -f "$pidfile"
    if port_open "$port"; then
        die "$name: port 127.0.0.1:$port is already in use by a process not started by up.sh"
    fi
    log "starting $name (log: ${logfile#"$ROOT"/})"
    printf '\n---- %s starting %s ----\n' "$(date -Is)" "$name" >>"$logfile"
    # setsid: own session, so a Ctrl-C on `make up` does not kill the stack.
    if command -v setsid >/dev/null; then
        nohup setsid "$@" >>"$logfile" 2>&1 </dev/null &
    else
        nohup "$@" >>"$logfile" 2>&1 </dev/null &
    fi
    echo $! >"$pidfile"
}

# wait_ready NAME PIDFILE LOGFILE CHECK...: poll CHECK until it succeeds.
wait_ready() {
    local name=$1 pidfile=$2 logfile=$3 deadline=$((SECONDS + READY_TIMEOUT))
    shift 3
    until "$@"; do
        if ! pid_alive "$pidfile"; then
            printf 'error: %s exited during startup; last log lines (%s):\n' "$name" "$logfile" >&2
            tail -n 30 "$logfile" >&2 || true
            rm -f "$pidfile"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            printf 'error: %s not ready after %ss; last log lines (%s):\n' "$name" "$READY_TIMEOUT" "$logfile" >&2
            tail -n 30 "$logfile" >&2 || true
            echo "($name is still running; stop the stack with deploy/local/down.sh)" >&2
            exit 1
        fi
        sleep 0.2
    done
    log "$name ready"
}

redis_ready() {
    if command -v redis-cli >/dev/null; then
        [[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]
    else
        port_open "$REDIS_PORT"
    fi
}
upstream_ready() { curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$UPSTREAM_PORT/_demo/health"; }
gateway_ready() {
    [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$ADMIN_PORT/readyz")" == 200 ]]
}

# --- prerequisites ---------------------------------------------------------
command -v redis-server >/dev/null || install_pkg redis-server
command -v curl >/dev/null || install_pkg curl
command -v cargo >/dev/null || die "cargo not found on PATH"
[[ -f $CONFIG ]] || die "gateway config $CONFIG not found"

log "building release binaries"
cargo build --release --bins

mkdir -p "$STATE/redis"

# --- redis -----------------------------------------------------------------
start redis-server "$STATE/redis.pid" "$STATE/redis.log" "$REDIS_PORT" \
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$STATE/redis" --daemonize no
wait_ready redis-server "$STATE/redis.pid" "$STATE/redis.log" redis_ready

# --- demo upstream ---------------------------------------------------------
start demo-upstream "$STATE/upstream.pid" "$STATE/upstream.log" "$UPSTREAM_PORT" \
    "$ROOT/target/release/demo-upstream" --listen "127.0.0.1:$UPSTREAM_PORT"
wait_ready demo-upstream "$STATE/upstream.pid" "$STATE/upstream.log" upstream_ready

# --- gateway ---------------------------------------------------------------
start idemgate "$STATE/gateway.pid" "$STATE/gateway.log" "$GATEWAY_PORT" \
    "$ROOT/target/release/idemgate" serve --config "$CONFIG"
wait_ready idemgate "$STATE/gateway.pid" "$STATE/gateway.log" gateway_ready

cat <<EOF

idemgate local stack is up:
  gateway    http://127.0.0.1:$GATEWAY_PORT   (routes /v1/ -> demo upstream)
  admin      http://127.0.0.1:$ADMIN_PORT   (GET /readyz)
  upstream   http://127.0.0.1:$UPSTREAM_PORT   (GET /_demo/executions, POST /_demo/reset)
  redis      redis://127.0.0.1:$REDIS_PORT
  logs       .state/{gateway,upstream,redis}.log
  stop with  make down   (or bash deploy/local/down.sh)

Try it (run twice: the 1st answer has Idempotent-Replayed: false, the 2nd true):
  curl -si -X POST http://127.0.0.1:$GATEWAY_PORT/v1/payments -H 'Idempotency-Key: demo-1' -H 'Content-Type: application/json' -d '{"amount":100}'
Then check the upstream ran it once:
  curl -s http://127.0.0.1:$UPSTREAM_PORT/_demo/executions
EOF
