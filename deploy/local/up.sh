#!/usr/bin/env bash
# Start the local idemgate fleet on loopback (used by `make up`):
#   redis-server    127.0.0.1:6390   no persistence, maxmemory-policy noeviction
#   postgres 15     127.0.0.1:5490   data in .state/pg (initdb on first run, kept
#                                    across `make down`); runs as `postgres` under root
#                                    (data under /var/tmp if it cannot reach .state)
#   demo-upstream   127.0.0.1:3000   fake payments API (src/bin/demo-upstream.rs)
#   idemgate x N    127.0.0.1:8081.. proxy, 127.0.0.1:9091.. admin (/readyz, /metrics)
#   haproxy         127.0.0.1:8080   round robin over the replicas, health check
#                                    GET /readyz on each admin port; stats on :8404
#   prometheus      127.0.0.1:9099   scrapes every replica's /metrics (only when
#                                    the Debian package could be installed)
# State (pid files, logs, generated configs, data) lives in .state/ at the repo root.
# Safe to run twice: a component whose pid file names a live process is left alone;
# a changed REPLICAS stops surplus replicas and reconfigures HAProxy and Prometheus.
# Stop everything with deploy/local/down.sh (`make down`).
#
# Environment:
#   REPLICAS          number of gateway replicas, 1..8 (default 3)
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
CONFIG="${IDEMGATE_CONFIG:-deploy/local/idemgate.toml}"
READY_TIMEOUT="${READY_TIMEOUT:-30}"
IDEMGATE="$ROOT/target/release/idemgate"
UPSTREAM_BIN="$ROOT/target/release/demo-upstream"
PROM_DIR="$STATE/prometheus"

if ! [[ $REPLICAS =~ ^[0-9]+$ ]] || ((REPLICAS < 1 || REPLICAS > MAX_REPLICAS)); then
    die "REPLICAS must be a number from 1 to $MAX_REPLICAS (got '$REPLICAS')"
fi

# launch NAME PIDFILE LOGFILE CMD...: start CMD in the background, pid in PIDFILE.
launch() {
    local name=$1 pidfile=$2 logfile=$3
    shift 3
    # Keep one previous log once a log passes 64 MiB (the replicas log every request).
    if [[ -f $logfile ]] && (($(stat -c %s "$logfile") > 64 * 1024 * 1024)); then
        mv -f "$logfile" "$logfile.1"
    fi
    printf '\n---- %s starting %s ----\n' "$(date -Is)" "$name" >>"$logfile"
    # setsid: own session, so a Ctrl-C on `make up` does not kill the stack.
    nohup setsid "$@" >>"$logfile" 2>&1 </dev/null &
    echo $! >"$pidfile"
}

# start NAME PIDFILE LOGFILE "PORT..." CMD...: start CMD in the background unless
# it is already running; refuses when one of the ports is taken by something else.
start() {
    local name=$1 pidfile=$2 logfile=$3 ports=$4 port
    shift 4
    if alive "$pidfile" "$name"; then
        log "$name already running (pid $(<"$pidfile"))"
        return 0
    fi
    rm -f "$pidfile"
    for port in $ports; do
        if port_open "$port"; then
            die "$name: port 127.0.0.1:$port is already in use by a process not started by up.sh"
        fi
    done
    log "starting $name (log: ${logfile#"$ROOT"/})"
    launch "$name" "$pidfile" "$logfile" "$@"
}

# wait_ready NAME PIDFILE LOGFILE CHECK...: poll CHECK until it succeeds.
wait_ready() {
    local name=$1 pidfile=$2 logfile=$3 deadline=$((SECONDS + READY_TIMEOUT))
    shift 3
    until "$@"; do
        if [[ -n $pidfile ]] && ! pid_alive "$(cat "$pidfile" 2>/dev/null)"; then
            printf 'error: %s exited during startup; last log lines (%s):\n' "$name" "${logfile#"$ROOT"/}" >&2
            tail -n 30 "$logfile" >&2 || true
            rm -f "$pidfile"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            printf 'error: %s not ready after %ss; last log lines (%s):\n' "$name" "$READY_TIMEOUT" "${logfile#"$ROOT"/}" >&2
            tail -n 30 "$logfile" >&2 || true
            echo "($name is still running; stop the fleet with make down)" >&2
            exit 1
        fi
        sleep 0.2
    done
    log "$name ready"
}

http_status() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" 2>/dev/null || true; }

redis_ready() { [[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }
pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 2; }
upstream_ready() { [[ "$(http_status "http://127.0.0.1:$UPSTREAM_PORT/_demo/health")" == 200 ]]; }
gateway_ready() { [[ "$(http_status "http://127.0.0.1:$((ADMIN_BASE + $1))/readyz")" == 200 ]]; }
prometheus_ready() { [[ "$(http_status "http://127.0.0.1:$PROM_PORT/-/ready")" == 200 ]]; }
# HAProxy is ready when every replica is UP in its stats and a request through
# it reaches a gateway (the gateway answers 404 route_not_found off /v1/).
haproxy_ready() {
    local up
    up=$(curl -s --max-time 2 "http://127.0.0.1:$LB_STATS_PORT/stats;csv" 2>/dev/null |
        awk -F, '$1 == "gateways" && $2 ~ /^gw[0-9]+$/ && $18 == "UP"' | wc -l) || return 1
    ((up == REPLICAS)) && [[ "$(http_status "http://127.0.0.1:$LB_PORT/")" == 404 ]]
}

# --- prerequisites ---------------------------------------------------------
# Debian packages, installed only when missing; `apt-get update` only then too.
# command-or-path:package
required=(redis-server:redis-server redis-cli:redis-tools "$PG_BIN/initdb:postgresql-15"
    haproxy:haproxy curl:curl)
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
[[ -x $IDEMGATE && -x $UPSTREAM_BIN ]] || die "target/release/{idemgate,demo-upstream} missing: run cargo build --release --bins"

mkdir -p "$STATE/redis"

# --- redis -----------------------------------------------------------------
start redis-server "$STATE/redis.pid" "$STATE/redis.log" "$REDIS_PORT" \
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --maxmemory-policy noeviction --dir "$STATE/redis" --daemonize no
wait_ready redis-server "$STATE/redis.pid" "$STATE/redis.log" redis_ready

# --- postgres --------------------------------------------------------------
if [[ ! -f $PGDATA/PG_VERSION && $EUID -eq 0 && $PG_HOME == "$STATE" ]] && ! as_pg test -x "$STATE"; then
    PG_HOME=$(mktemp -d /var/tmp/idemgate-pg.XXXXXX)
    chown postgres:postgres "$PG_HOME"
    printf '%s\n' "$PG_HOME" >"$STATE/pg.home"
    PGDATA="$PG_HOME/pg" PG_LOG="$PG_HOME/postgres.log"
    log "the postgres account cannot reach $STATE (a parent directory is private); the cluster goes to $PG_HOME"
fi
if [[ ! -f $PGDATA/PG_VERSION ]]; then
    if [[ -d $PGDATA ]] && [[ -n "$(ls -A "$PGDATA")" ]]; then
        die "$PGDATA exists but holds no Postgres cluster; remove it to let make up initdb afresh"
    fi
    log "initdb ${PGDATA#"$ROOT"/} (first run)"
    mkdir -p "$PGDATA"
    [[ $EUID -eq 0 ]] && chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -A trust -U postgres -E UTF8 --locale=C >>"$STATE/initdb.log" 2>&1 ||
        { tail -n 20 "$STATE/initdb.log" >&2; die "initdb failed (log: .state/initdb.log)"; }
fi
if pg_running; then
    log "postgres already running (pid $(head -n1 "$PGDATA/postmaster.pid"))"
else
    port_open "$PG_PORT" && die "postgres: port 127.0.0.1:$PG_PORT is already in use by a process not started by up.sh"
    log "starting postgres (log: ${PG_LOG#"$ROOT"/})"
    touch "$PG_LOG"
    [[ $EUID -eq 0 ]] && chown postgres:postgres "$PG_LOG"
    # TCP on loopback only; no Unix socket (its path could exceed the 107-byte limit).
    as_pg "$PG_BIN/pg_ctl" start -D "$PGDATA" -l "$PG_LOG" -w -t "$READY_TIMEOUT" -s \
        -o "-c port=$PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" ||
        { tail -n 20 "$PG_LOG" >&2; die "postgres did not start (log: $PG_LOG)"; }
fi
wait_ready postgres "" "$PG_LOG" pg_ready

# Schema: the replicas also migrate on start (safe concurrently); doing it once
# here first reports a bad URL or schema before anything else starts.
log "applying database migrations"
"$IDEMGATE" migrate --config "$CONFIG" || die "idemgate migrate failed"

# --- demo upstream ---------------------------------------------------------
start demo-upstream "$STATE/upstream.pid" "$STATE/upstream.log" "$UPSTREAM_PORT" \
    "$UPSTREAM_BIN" --listen "127.0.0.1:$UPSTREAM_PORT"
wait_ready demo-upstream "$STATE/upstream.pid" "$STATE/upstream.log" upstream_ready

# --- gateway replicas ------------------------------------------------------
# The single gateway of the earlier layout held port 8080, which HAProxy needs.
if [[ -f $STATE/gateway.pid ]]; then
    log "stopping the gateway of the earlier single-gateway layout"
    stop_gateways 35 "$STATE/gateway.pid"
fi
for ((i = 1; i <= REPLICAS; i++)); do
    start idemgate "$STATE/gateway-$i.pid" "$STATE/gateway-$i.log" "$((PROXY_BASE + i)) $((ADMIN_BASE + i))" \
        env NO_COLOR=1 IDEMGATE__SERVER__LISTEN="127.0.0.1:$((PROXY_BASE + i))" \
        IDEMGATE__SERVER__ADMIN_LISTEN="127.0.0.1:$((ADMIN_BASE + i))" \
        "$IDEMGATE" serve --config "$CONFIG"
done
stale=0
for ((i = 1; i <= REPLICAS; i++)); do
    wait_ready "idemgate replica $i" "$STATE/gateway-$i.pid" "$STATE/gateway-$i.log" gateway_ready "$i"
    # /proc/PID's mtime is the process start time.
    if [[ $IDEMGATE -nt /proc/$(<"$STATE/gateway-$i.pid") ]]; then stale=1; fi
done
((stale)) && warn "target/release/idemgate was rebuilt after some replicas started; run make down && make up to restart them"

# --- haproxy ---------------------------------------------------------------
HAPROXY_CFG="$STATE/haproxy.cfg"
{
    cat <<EOF
# Generated by deploy/local/up.sh for REPLICAS=$REPLICAS; do not edit.
global
    maxconn 4096
    log stdout format raw local0 info
    hard-stop-after 30s       # an old process left by a reload (up.sh -sf) exits by then

defaults
    mode http
    log global
    option httplog
    option dontlog-normal     # log errors and timeouts only
    option abortonclose       # a client that hangs up aborts its request on the replica too
    timeout connect 2s
    timeout client 60s
    timeout server 60s        # above the route's upstream_timeout (20s)
    timeout http-keep-alive 30s
    timeout check 2s

frontend idemgate
    bind 127.0.0.1:$LB_PORT
    default_backend gateways

backend gateways
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
EOF
    for ((i = 1; i <= REPLICAS; i++)); do
        printf '    server gw%d 127.0.0.1:%d check port %d\n' "$i" "$((PROXY_BASE + i))" "$((ADMIN_BASE + i))"
    done
    cat <<EOF

frontend stats
    bind 127.0.0.1:$LB_STATS_PORT
    stats enable
    stats uri /stats
    stats refresh 5s
    http-request redirect location /stats if { path / }
EOF
} >"$HAPROXY_CFG.new"
haproxy -c -q -f "$HAPROXY_CFG.new" || die "generated $HAPROXY_CFG.new is invalid"
if alive "$STATE/haproxy.pid" haproxy && ! cmp -s "$HAPROXY_CFG.new" "$HAPROXY_CFG"; then
    # Hitless reload: a new process binds next to the old one (SO_REUSEPORT),
    # then tells it (-sf) to stop accepting and finish its connections; the old
    # one is gone within hard-stop-after. down.sh also stops it (haproxy-old.pid).
    old=$(<"$STATE/haproxy.pid")
    mv -f "$HAPROXY_CFG.new" "$HAPROXY_CFG"
    log "haproxy configuration changed (REPLICAS=$REPLICAS): reloading (new process replaces pid $old)"
    echo "$old" >"$STATE/haproxy-old.pid"
    launch haproxy "$STATE/haproxy.pid" "$STATE/haproxy.log" haproxy -db -f "$HAPROXY_CFG" -sf "$old"
else
    mv -f "$HAPROXY_CFG.new" "$HAPROXY_CFG"
    start haproxy "$STATE/haproxy.pid" "$STATE/haproxy.log" "$LB_PORT $LB_STATS_PORT" \
        haproxy -db -f "$HAPROXY_CFG"
fi
wait_ready haproxy "$STATE/haproxy.pid" "$STATE/haproxy.log" haproxy_ready

# --- surplus replicas ------------------------------------------------------
# From an earlier, larger REPLICAS: stopped once HAProxy no longer sends them
# traffic; they drain their in-flight requests.
surplus=()
while IFS= read -r f; do
    n=${f##*/gateway-}
    n=${n%.pid}
    if [[ $n =~ ^[0-9]+$ ]] && ((n > REPLICAS)); then surplus+=("$f"); fi
done < <(gateway_pidfiles)
if ((${#surplus[@]})); then
    log "stopping ${#surplus[@]} surplus gateway replica(s)"
    stop_gateways 35 "${surplus[@]}"
fi

# --- prometheus ------------------------------------------------------------
have_prometheus=0
if command -v prometheus >/dev/null; then
    have_prometheus=1
    mkdir -p "$PROM_DIR/targets" "$PROM_DIR/data"
    # Prometheus resolves rule_files and file_sd paths relative to the config
    # file it is given: run it on links in .state/prometheus/ so that
    # targets/idemgate.json (written here) sits next to the committed config.
    ln -sfn "$ROOT/deploy/prometheus/prometheus.yml" "$PROM_DIR/prometheus.yml"
    ln -sfn "$ROOT/deploy/prometheus/alerts.yml" "$PROM_DIR/alerts.yml"
    {
        printf '['
        for ((i = 1; i <= REPLICAS; i++)); do
            ((i > 1)) && printf ','
            printf '\n  {"targets": ["127.0.0.1:%d"], "labels": {"replica": "gw%d"}}' "$((ADMIN_BASE + i))" "$i"
        done
        printf '\n]\n'
    } >"$PROM_DIR/targets/idemgate.json.tmp"
    mv -f "$PROM_DIR/targets/idemgate.json.tmp" "$PROM_DIR/targets/idemgate.json" # atomic: file_sd reloads it
    start prometheus "$STATE/prometheus.pid" "$STATE/prometheus.log" "$PROM_PORT" \
        prometheus --config.file="$PROM_DIR/prometheus.yml" \
        --storage.tsdb.path="$PROM_DIR/data" --storage.tsdb.retention.time=2d \
        --web.listen-address="127.0.0.1:$PROM_PORT" --web.enable-lifecycle
    wait_ready prometheus "$STATE/prometheus.pid" "$STATE/prometheus.log" prometheus_ready
else
    warn "prometheus is not installed; running without it"
fi

# --- summary ---------------------------------------------------------------
replica_lines=""
for ((i = 1; i <= REPLICAS; i++)); do
    replica_lines+=$(printf '\n  replica %d  http://127.0.0.1:%d   admin http://127.0.0.1:%d/readyz  /metrics' \
        "$i" "$((PROXY_BASE + i))" "$((ADMIN_BASE + i))")
done
prom_line="  prometheus http://127.0.0.1:$PROM_PORT/targets"
((have_prometheus)) || prom_line="  prometheus (not installed)"
demo_key="demo-$(date +%s)"  # fresh per run: stored responses outlive make down (Postgres)
cat <<EOF

idemgate local fleet is up ($REPLICAS replicas):
  gateway    http://127.0.0.1:$LB_PORT   (HAProxy, round robin; routes /v1/ -> demo upstream)
  haproxy    http://127.0.0.1:$LB_STATS_PORT/stats$replica_lines
$prom_line
  upstream   http://127.0.0.1:$UPSTREAM_PORT   (GET /_demo/executions, POST /_demo/reset)
  redis      redis://127.0.0.1:$REDIS_PORT
  postgres   postgres://postgres@127.0.0.1:$PG_PORT/postgres   (data in ${PGDATA#"$ROOT"/})
  logs       .state/*.log
  stop with  make down

Try it (run twice: the 1st answer has Idempotent-Replayed: false, the 2nd true):
  curl -si -X POST http://127.0.0.1:$LB_PORT/v1/payments -H 'Idempotency-Key: $demo_key' -H 'Content-Type: application/json' -d '{"amount":100}'
Then check the upstream ran it once:
  curl -s http://127.0.0.1:$UPSTREAM_PORT/_demo/executions
Load tests against this fleet: make loadtest
EOF
