#!/usr/bin/env bash
# Stop the local idemgate fleet started by deploy/local/up.sh (`make down`), through
# the launcher that started it (`idemgate-fleet down`).
# Order: the gateway replicas first (SIGTERM, all at once, so they drain their
# in-flight requests and flush the Postgres write-through queue while Redis and
# Postgres are still up), then the demo upstream, HAProxy, Prometheus, Postgres
# (`pg_ctl stop -m fast`; with POSTGRES=patroni every patroni, which stops its
# Postgres, then etcd) and Redis (sentinels, then every data node, of whichever
# REDIS the fleet runs on). Each process named in a .state/*.pid file
# gets SIGTERM and a grace period, then SIGKILL; pid files are removed.
# Postgres data (.state/pg) is kept, and so is the standalone Redis' (.state/redis*,
# its AOF); a cluster or sentinel tier is created afresh at the next `make up`.
# Safe to run when nothing is running.
#
# Environment:
#   GRACE_SECONDS          grace for each component (default 10)
#   GATEWAY_GRACE_SECONDS  grace for the replicas (default 35: above their
#                          server.shutdown_grace of 30s)
set -euo pipefail

# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export GRACE_SECONDS="${GRACE_SECONDS:-10}"
export GATEWAY_GRACE_SECONDS="${GATEWAY_GRACE_SECONDS:-35}"

# The launcher (fleet/, `idemgate-fleet`) that started the fleet stops it.
FLEET="$ROOT/target/release/idemgate-fleet"
if [[ ! -x $FLEET ]]; then
    log "no target/release/idemgate-fleet: nothing was started by make up"
    exit 0
fi
cd "$ROOT"
exec "$FLEET" down
