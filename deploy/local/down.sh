#!/usr/bin/env bash
# Stop the local idemgate fleet started by deploy/local/up.sh (`make down`).
# Order: the gateway replicas first (SIGTERM, all at once, so they drain their
# in-flight requests and flush the Postgres write-through queue while Redis and
# Postgres are still up), then the demo upstream, HAProxy, Prometheus, Postgres
# (`pg_ctl stop -m fast`) and Redis. Each process named in a .state/*.pid file
# gets SIGTERM and a grace period, then SIGKILL; pid files are removed.
# Postgres data (.state/pg) is kept; Redis has no persistence.
# Safe to run when nothing is running.
#
# Environment:
#   GRACE_SECONDS          grace for each component (default 10)
#   GATEWAY_GRACE_SECONDS  grace for the replicas (default 35: above their
#                          server.shutdown_grace of 30s)
set -euo pipefail

# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GRACE_SECONDS="${GRACE_SECONDS:-10}"
GATEWAY_GRACE_SECONDS="${GATEWAY_GRACE_SECONDS:-35}"

mapfile -t gateways < <(gateway_pidfiles)
if ((${#gateways[@]})); then
    stop_gateways "$GATEWAY_GRACE_SECONDS" "${gateways[@]}"
else
    log "idemgate not running"
fi
stop demo-upstream "$STATE/upstream.pid" "$GRACE_SECONDS"
stop haproxy "$STATE/haproxy.pid" "$GRACE_SECONDS"
[[ -f $STATE/haproxy-old.pid ]] && stop haproxy "$STATE/haproxy-old.pid" "$GRACE_SECONDS"
stop prometheus "$STATE/prometheus.pid" "$GRACE_SECONDS"

if [[ -x $PG_BIN/pg_ctl ]] && pg_running; then
    log "stopping postgres (pg_ctl stop -m fast)"
    as_pg "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t "$GRACE_SECONDS" -s ||
        {
            pid=$(head -n1 "$PGDATA/postmaster.pid" 2>/dev/null || true)
            if [[ -n $pid ]] && pid_alive "$pid" && program_is "$pid" postgres; then
                warn "postgres did not stop within ${GRACE_SECONDS}s; pg_ctl stop -m immediate"
                as_pg "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m immediate -w -t "$GRACE_SECONDS" -s || true
            fi
        }
else
    log "postgres not running"
fi

stop redis-server "$STATE/redis.pid" "$GRACE_SECONDS"
log "local fleet stopped"
