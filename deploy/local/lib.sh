# Shared helpers for deploy/local/up.sh and down.sh (sourced, not run).
# shellcheck shell=bash disable=SC2034 # the port constants are used by up.sh and down.sh

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.state"

# Fixed ports of the local fleet (all on 127.0.0.1).
REDIS_PORT=6390
PG_PORT=5490
UPSTREAM_PORT=3000
LB_PORT=8080        # HAProxy
LB_STATS_PORT=8404  # HAProxy stats page
PROM_PORT=9099      # Prometheus
PROXY_BASE=8080     # replica i listens on PROXY_BASE+i (8081, 8082, ...)
ADMIN_BASE=9090     # and has its admin listener on ADMIN_BASE+i (9091, 9092, ...)
MAX_REPLICAS=8      # replica 9 would take 9099, Prometheus' port

PG_BIN=/usr/lib/postgresql/15/bin
# Where the cluster and its server log live: .state, or, when root runs the fleet from a
# checkout the `postgres` account cannot reach (a private home or `mktemp -d` parent),
# the directory that up.sh made for it under /var/tmp and named in .state/pg.home.
PG_HOME="$STATE"
[[ -f $STATE/pg.home ]] && PG_HOME=$(<"$STATE/pg.home")
PGDATA="$PG_HOME/pg"
PG_LOG="$PG_HOME/postgres.log"

log() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# as_root CMD...: run CMD as root (directly, or through sudo).
as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# as_pg CMD...: run a Postgres server command as the unprivileged `postgres`
# account when we are root (Postgres refuses to run as root); as ourselves otherwise.
as_pg() {
    if [[ $EUID -eq 0 ]]; then
        # From /, which `postgres` can always enter (it may not enter the checkout).
        if command -v runuser >/dev/null; then
            (cd / && runuser -u postgres -- "$@")
        else
            (cd / && setpriv --reuid=postgres --regid=postgres --init-groups -- "$@")
        fi
    else
        "$@"
    fi
}

# pg_running: the cluster in $PGDATA has a live postmaster.
pg_running() {
    [[ -f $PGDATA/PG_VERSION ]] && as_pg "$PG_BIN/pg_ctl" status -D "$PGDATA" >/dev/null 2>&1
}

# pid_alive PID: a live, non-zombie process.
pid_alive() {
    [[ $1 =~ ^[0-9]+$ ]] && kill -0 "$1" 2>/dev/null || return 1
    [[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]]
}

# program_is PID NAME: the program name of PID is NAME (guards against pid reuse).
program_is() {
    local argv0
    argv0=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -n1) || return 1
    argv0=${argv0%% *}
    [[ ${argv0##*/} == "$2" ]]
}

# alive PIDFILE NAME: the pid file names a live process whose program is NAME.
alive() {
    local pidfile=$1 name=$2 pid
    [[ -f $pidfile ]] || return 1
    pid=$(<"$pidfile")
    pid_alive "$pid" && program_is "$pid" "$name"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# signal_pidfile NAME PIDFILE: send SIGTERM to the process a pid file names, if
# it is alive and still NAME; prints its pid (nothing when there is nothing to
# wait for). Stale pid files are removed.
signal_pidfile() {
    local name=$1 pidfile=$2 pid
    if [[ ! -f $pidfile ]]; then
        return 0
    fi
    pid=$(<"$pidfile")
    if ! pid_alive "$pid"; then
        log "$name not running (stale pid file ${pidfile#"$ROOT"/})" >&2
        rm -f "$pidfile"
        return 0
    fi
    if ! program_is "$pid" "$name"; then
        log "$name: pid $pid now belongs to another program; leaving it alone" >&2
        rm -f "$pidfile"
        return 0
    fi
    log "stopping $name (pid $pid, SIGTERM)" >&2
    kill -TERM "$pid" 2>/dev/null || true
    echo "$pid"
}

# wait_exit GRACE_SECONDS NAME PID...: wait for the PIDs to exit; SIGKILL any
# still alive after GRACE_SECONDS.
wait_exit() {
    local grace=$1 name=$2 pid i left
    shift 2
    for ((i = 0; i < grace * 10; i++)); do
        left=0
        for pid in "$@"; do pid_alive "$pid" && left=1; done
        ((left)) || return 0
        sleep 0.1
    done
    for pid in "$@"; do
        if pid_alive "$pid"; then
            warn "$name (pid $pid) did not exit within ${grace}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for ((i = 0; i < 20; i++)); do
        left=0
        for pid in "$@"; do pid_alive "$pid" && left=1; done
        ((left)) || return 0
        sleep 0.1
    done
}

# stop NAME PIDFILE [GRACE]: SIGTERM, wait up to GRACE seconds (default 10), SIGKILL.
stop() {
    local name=$1 pidfile=$2 grace=${3:-10} pid
    if [[ ! -f $pidfile ]]; then
        log "$name not running"
        return 0
    fi
    pid=$(signal_pidfile "$name" "$pidfile")
    [[ -n $pid ]] || return 0
    wait_exit "$grace" "$name" "$pid"
    rm -f "$pidfile"
}

# gateway_pidfiles: every replica pid file in .state, whatever REPLICAS was
# (plus gateway.pid of the earlier single-gateway layout).
gateway_pidfiles() {
    local f
    for f in "$STATE"/gateway-*.pid "$STATE"/gateway.pid; do
        [[ -f $f ]] && printf '%s\n' "$f"
    done
    return 0
}

# stop_gateways GRACE PIDFILE...: SIGTERM all of them at once, then wait.
stop_gateways() {
    local grace=$1 f pid pids=()
    shift
    for f in "$@"; do
        pid=$(signal_pidfile idemgate "$f")
        [[ -n $pid ]] && pids+=("$pid")
    done
    if ((${#pids[@]})); then
        wait_exit "$grace" idemgate "${pids[@]}"
    fi
    for f in "$@"; do rm -f "$f"; done
}
