#!/usr/bin/env bash
# Start the local idemgate fleet on loopback (used by `make up`):
#   redis-server    127.0.0.1:6390   and its replica on 6393 (REDIS=standalone, the
#                                    default), files in .state/redis*/ kept across
#                                    `make down`; or
#     REDIS=cluster   a Redis Cluster: six nodes on 7001..7006 (bus 17001..17006),
#                     3 primaries with a replica each, node files in .state/redis-cluster/
#     REDIS=sentinel  a primary (6391), a replica (6392) and three sentinels
#                     (26381..26383, service "idemgate"), files in .state/redis-sentinel/
#                     (the replicas get redis.mode and its nodes through IDEMGATE__REDIS__*)
#                   every Redis data node: appendonly yes, appendfsync always, noeviction
#   postgres 15     127.0.0.1:5490   data in .state/pg (initdb on first run, kept
#                                    across `make down`); runs as `postgres` under root
#                                    (data under /var/tmp if it cannot reach .state)
#     POSTGRES=patroni  a Patroni set instead: etcd and three nodes (ports in lib.sh and
#                     docs/operations.md, "The local fleet"), synchronous replication,
#                     database idemgate, data in .state/patroni/; the replicas and
#                     `idemgate migrate` get the multi-host URL (target_session_attrs=
#                     read-write) through IDEMGATE__POSTGRES__URL
#   demo-upstream   127.0.0.1:3000   fake payments API (src/bin/demo-upstream/main.rs)
#   idemgate x N    127.0.0.1:8081.. proxy, 127.0.0.1:9091.. admin (/readyz, /metrics)
#   haproxy         127.0.0.1:8080   round robin over the replicas, health check
#                                    GET /readyz on each admin port; stats on :8404;
#                                    HTTP/1.1 to the replicas, or HTTP/2 (h2c,
#                                    `proto h2`) with PROTO=h2; clients speak HTTP/1.1
#   prometheus      127.0.0.1:9099   scrapes every replica's /metrics (only when
#                                    the Debian package could be installed)
# State (pid files, logs, generated configs, data) lives in .state/ at the repo root.
# Safe to run twice: a component whose pid file names a live process is left alone;
# a changed REPLICAS stops surplus replicas and reconfigures HAProxy and Prometheus.
# Another REDIS than the running fleet's is refused: `make down` first.
# Stop everything with deploy/local/down.sh (`make down`).
#
# Environment:
#   REPLICAS          number of gateway replicas, 1..8 (default 3)
#   REDIS             standalone (default), cluster or sentinel: the Redis tier
#   POSTGRES          single (default) or patroni: the Postgres tier
#   PROTO             http1 (default) or h2: what HAProxy speaks to the replicas
#   IDEMGATE_CONFIG   gateway config (default deploy/local/idemgate.toml)
#   DEMO_LATENCY, DEMO_FAIL_RATE, DEMO_FAIL_STATUS, DEMO_RESET_RATE
#                     passed through to demo-upstream (see its --help)
#   READY_TIMEOUT     seconds to wait for each component (default 30)
#   NO_BUILD=1        skip `cargo build --release --bins`
set -euo pipefail

# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

REPLICAS="${REPLICAS:-3}"
REDIS="${REDIS:-standalone}"
POSTGRES="${POSTGRES:-single}"
PROTO="${PROTO:-http1}"
CONFIG="${IDEMGATE_CONFIG:-deploy/local/idemgate.toml}"
READY_TIMEOUT="${READY_TIMEOUT:-30}"
IDEMGATE="$ROOT/target/release/idemgate"
UPSTREAM_BIN="$ROOT/target/release/demo-upstream"
FLEET="$ROOT/target/release/idemgate-fleet"

if ! [[ $REPLICAS =~ ^[0-9]+$ ]] || ((REPLICAS < 1 || REPLICAS > MAX_REPLICAS)); then
    die "REPLICAS must be a number from 1 to $MAX_REPLICAS (got '$REPLICAS')"
fi
case $REDIS in
standalone | cluster | sentinel) ;;
*) die "REDIS must be standalone, cluster or sentinel (got '$REDIS')" ;;
esac
case $POSTGRES in
single | patroni) ;;
*) die "POSTGRES must be single or patroni (got '$POSTGRES')" ;;
esac
case $PROTO in
http1 | h2) ;;
*) die "PROTO must be http1 or h2 (got '$PROTO')" ;;
esac

# --- prerequisites ---------------------------------------------------------
# Debian packages, installed only when missing; `apt-get update` only then too.
# command-or-path:package
required=(redis-server:redis-server redis-cli:redis-tools "$PG_BIN/initdb:postgresql-15"
    haproxy:haproxy curl:curl)
[[ $POSTGRES == patroni ]] && required+=(patroni:patroni etcd:etcd-server etcdctl:etcd-client)
missing=()
for pair in "${required[@]}"; do
    cmd=${pair%%:*} pkg=${pair#*:}
    if [[ $cmd == /* ]]; then [[ -x $cmd ]] || missing+=("$pkg"); else command -v "$cmd" >/dev/null || missing+=("$pkg"); fi
done
want_prometheus=0
command -v prometheus >/dev/null || want_prometheus=1
if ((${#missing[@]} + want_prometheus)); then
    log "installing missing Debian packages: ${missing[*]} $( ((want_prometheus)) && echo prometheus)"
    as_root apt-get update -qq || warn "apt-get update failed; trying the package lists at hand"
    if ((${#missing[@]})); then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
            die "could not install ${missing[*]}"
    fi
    if ((want_prometheus)); then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus ||
            warn "could not install prometheus; the fleet will run without it"
    fi
fi
command -v cargo >/dev/null || die "cargo not found on PATH"
[[ -f $CONFIG ]] || die "gateway config $CONFIG not found"
if [[ $EUID -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' account (it comes with postgresql-15)"
fi

if [[ ${NO_BUILD:-0} != 1 ]]; then
    log "building release binaries"
    cargo build --release --bins
fi
[[ -x $IDEMGATE && -x $UPSTREAM_BIN && -x $FLEET ]] ||
    die "target/release/{idemgate,demo-upstream,idemgate-fleet} missing: run cargo build --release --bins"

# --- the fleet ---------------------------------------------------------------
# Started by the launcher (fleet/, `idemgate-fleet`), the same code that starts the
# chaos suite's fleet: Redis, Postgres (initdb on first run; migrations), the demo
# upstream, the replicas, HAProxy and Prometheus, each waited for until ready. It
# reads REPLICAS, REDIS, POSTGRES, PROTO, IDEMGATE_CONFIG and READY_TIMEOUT; DEMO_* reach the
# upstream.
export REPLICAS REDIS POSTGRES PROTO READY_TIMEOUT IDEMGATE_CONFIG="$CONFIG"
"$FLEET" up || die "the fleet did not start (see the error above; logs: .state/*.log)"
[[ -f $STATE/pg.home ]] && PGDATA="$(<"$STATE/pg.home")/pg"
have_prometheus=0
command -v prometheus >/dev/null && have_prometheus=1

# --- summary ---------------------------------------------------------------
replica_lines=""
for ((i = 1; i <= REPLICAS; i++)); do
    replica_lines+=$(printf '\n  replica %d  http://127.0.0.1:%d   admin http://127.0.0.1:%d/readyz  /metrics' \
        "$i" "$((PROXY_BASE + i))" "$((ADMIN_BASE + i))")
done
prom_line="  prometheus http://127.0.0.1:$PROM_PORT/targets"
# urls "PORT PORT...": 127.0.0.1:PORT ... (the lists in lib.sh are space separated)
urls() { local p out=""; for p in $1; do out+="${out:+ }127.0.0.1:$p"; done; echo "$out"; }
case $REDIS in
standalone) redis_line="  redis      redis://127.0.0.1:$REDIS_PORT (replica on $REDIS_REPLICA_PORT)" ;;
cluster) redis_line="  redis      cluster, 3 primaries + 1 replica each: $(urls "$CLUSTER_PORTS")" ;;
sentinel) redis_line="  redis      primary + replica $(urls "$SENTINEL_DATA_PORTS"), sentinels $(urls "$SENTINEL_PORTS") (service idemgate)" ;;
esac
((have_prometheus)) || prom_line="  prometheus (not installed)"
pg_line="  postgres   postgres://postgres@127.0.0.1:$PG_PORT/postgres   (single server, data in ${PGDATA#"$ROOT"/})"
if [[ $POSTGRES == patroni ]]; then
    pg_line="  postgres   Patroni, 3 nodes, synchronous: $(urls "$PATRONI_PG_PORTS") (REST $(urls "$PATRONI_REST_PORTS"), etcd 127.0.0.1:$ETCD_PORT)
             gateways use postgres://postgres@$(urls "$PATRONI_PG_PORTS" | tr ' ' ,)/idemgate?target_session_attrs=read-write
             members and primary: target/release/idemgate-fleet status"
fi
demo_key="demo-$(date +%s)"  # fresh per run: stored responses outlive make down (Postgres)
cat <<EOF

idemgate local fleet is up ($REPLICAS replicas, Redis $REDIS, Postgres $POSTGRES, HAProxy to the replicas over $PROTO):
  gateway    http://127.0.0.1:$LB_PORT   (HAProxy, round robin; routes /v1/ -> demo upstream)
  haproxy    http://127.0.0.1:$LB_STATS_PORT/stats$replica_lines
$prom_line
  upstream   http://127.0.0.1:$UPSTREAM_PORT   (GET /_demo/executions, POST /_demo/reset)
$redis_line
$pg_line
  logs       .state/*.log
  stop with  make down

Try it (run twice: the 1st answer has Idempotent-Replayed: false, the 2nd true):
  curl -si -X POST http://127.0.0.1:$LB_PORT/v1/payments -H 'X-Tenant-Id: acme' -H 'Idempotency-Key: $demo_key' -H 'Content-Type: application/json' -d '{"amount":100}'
Then check the upstream ran it once:
  curl -s http://127.0.0.1:$UPSTREAM_PORT/_demo/executions
Load tests against this fleet: make loadtest
EOF
