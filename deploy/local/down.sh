#!/usr/bin/env bash
# Stop the local idemgate stack started by deploy/local/up.sh (`make down`).
# Each process named in a .state/*.pid file gets SIGTERM, up to 10 s to exit,
# then SIGKILL; pid files are removed. Safe to run when nothing is running.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.state"
GRACE_SECONDS="${GRACE_SECONDS:-10}"

log() { printf '==> %s\n' "$*"; }

# pid_alive PID: a live, non-zombie process.
pid_alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]]
}

# program_is PID NAME: the program name of PID is NAME (guards against pid reuse).
program_is() {
    local argv0
    argv0=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -n1) || return 1
    argv0=${argv0%% *}
    [[ ${argv0##*/} == "$2" ]]
}

# stop NAME PIDFILE
stop() {
    local name=$1 pidfile=$2 pid i
    if [[ ! -f $pidfile ]]; then
        log "$name not running (no pid file)"
        return 0
    fi
    pid=$(<"$pidfile")
    if ! [[ $pid =~ ^[0-9]+$ ]] || ! pid_alive "$pid"; then
        log "$name not running (stale pid file)"
        rm -f "$pidfile"
        return 0
    fi
    if ! program_is "$pid" "$name"; then
        log "$name: pid $pid now belongs to another program; leaving it alone"
        rm -f "$pidfile"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < GRACE_SECONDS * 10; i++)); do
        pid_alive "$pid" || break
        sleep 0.1
    done
    if pid_alive "$pid"; then
        log "$name did not exit within ${GRACE_SECONDS}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 20; i++)); do
            pid_alive "$pid" || break
            sleep 0.1
        done
    fi
    rm -f "$pidfile"
}

# Reverse start order: gateway first, so it never sees its backends vanish
# while still accepting traffic.
stop idemgate "$STATE/gateway.pid"
stop demo-upstream "$STATE/upstream.pid"
stop redis-server "$STATE/redis.pid"
log "local stack stopped"
