# Shared settings and helpers for deploy/local/up.sh and down.sh (sourced, not run).
# Starting and stopping the parts is the launcher's job (fleet/, `idemgate-fleet`);
# these scripts install what is missing, build, and print where things are.
# shellcheck shell=bash disable=SC2034 # the port constants are used by up.sh and down.sh

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.state"

# Fixed ports of the local fleet (all on 127.0.0.1).
REDIS_PORT=6390    # REDIS=standalone
REDIS_REPLICA_PORT=6393  # and its replica
CLUSTER_PORTS="7001 7002 7003 7004 7005 7006"  # REDIS=cluster (bus on port+10000)
SENTINEL_DATA_PORTS="6391 6392"                # REDIS=sentinel: primary, replica
SENTINEL_PORTS="26381 26382 26383"             # and three sentinels
PG_PORT=5490
PATRONI_PG_PORTS="5491 5492 5493"    # POSTGRES=patroni: Postgres of each node
PATRONI_REST_PORTS="8008 8009 8010"  # and its Patroni REST API
ETCD_PORT=2389                       # etcd client port (peer 2390)
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
# the directory the launcher made for it under /var/tmp and named in .state/pg.home.
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
