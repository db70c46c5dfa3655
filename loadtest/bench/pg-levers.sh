#!/usr/bin/env bash
# Postgres cost per durable first execution on a big table: a Postgres of its own (free
# ports, under .state/pglevers), seeded once with SEED_ROWS records shaped like the
# gateway's, then the real gateway (the binary given) + Redis + demo-upstream driven by wrk
# (full load) and k6 (fixed rate). Prints, per run: req/s, CPU µs of all Postgres
# processes per first execution, WAL bytes per first execution, HOT share of updates,
# and the k6 p50/p99/max; leaves pg_stat_statements of the run in $STATE/stmts-<tag>.txt.
#
#   bash loadtest/bench/pg-levers.sh seed                   # initdb, migrate 0001-0003, seed
#   bash loadtest/bench/pg-levers.sh run TAG BINARY         # one measurement with BINARY
#   bash loadtest/bench/pg-levers.sh schema 3|4             # put the schema at 3 or 4 (A/B)
#   bash loadtest/bench/pg-levers.sh stop
#
# Environment: STATE (.state/pglevers), PGPORT (55432), REDIS_PORT (56379), SEED_ROWS
# (10000000), DURATION (wrk seconds, 10), RATE (k6
# req/s, 400), LAT_DURATION (k6, 20s), CONNS (wrk connections, 32), PERF (set: `perf
# record -g` of every Postgres process for 5 s of the wrk run, in $STATE/perf-TAG.data),
# REDIS_ARGS (more redis-server arguments, e.g. "--appendonly yes --appendfsync always"),
# GW_ENV (more gateway settings, space-separated, e.g. IDEMGATE__POSTGRES__CLAIMS=vouched),
# WARM (set: every warmth marker of the Redis two days old once it runs, as `make bench`
# has them: no lookup on a miss under `lookup_on_miss = "when_cold"`).
# Runs as root: Postgres runs as the `postgres` account (setpriv).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${STATE:-$ROOT/.state/pglevers}
PGPORT=${PGPORT:-55432}
REDIS_PORT=${REDIS_PORT:-56379}
SEED_ROWS=${SEED_ROWS:-10000000}
DURATION=${DURATION:-10}
RATE=${RATE:-400}
LAT_DURATION=${LAT_DURATION:-20s}
CONNS=${CONNS:-32}
PSQL=(psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d idemgate)
PG_CONF="shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
shared_buffers = 2GB
max_wal_size = 8GB
synchronous_commit = on
track_io_timing = on"
# shellcheck source=loadtest/bench/pg-lib.sh
. "$ROOT/loadtest/bench/pg-lib.sh"
# The bench launcher's first replica (`idemgate-fleet bench ports`).
GW_PORT=$(("$("$FLEET" bench ports | python3 -c 'import json, sys; print(json.load(sys.stdin)["gateway_base"])')" + 1))

seed() {
  pg_start
  psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -c "CREATE DATABASE idemgate" 2>/dev/null || true
  "${PSQL[@]}" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
  "${PSQL[@]}" -c "CREATE TABLE idemgate_schema (version integer PRIMARY KEY, name text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now())"
  for f in 0001_records.sql 0002_fencing.sql 0003_completer.additive.sql; do
    "${PSQL[@]}" -f "$ROOT/migrations/$f"
    "${PSQL[@]}" -c "INSERT INTO idemgate_schema (version, name) VALUES (${f:0:4}, '$f')"
  done
  # Completed records as the gateway writes them (pg-lib.sh), expiring over the next
  # 1-2 days.
  time "${PSQL[@]}" -c "INSERT INTO idemgate_records
      (scope, key_hash, route, fingerprint, state, lock_token, status, headers, body,
       created_at, completed_at, expires_at, fence)
    SELECT s, k, 'payments', f, 'completed', t, 201, h, b, now(), now(), e, 0
    FROM ($(seed_rows "now() + interval '1 day' + random() * interval '1 day'")) AS r"
  time "${PSQL[@]}" -c "VACUUM ANALYZE idemgate_records"
}

# schema 3: as the previous release left it; schema 4: migration 0004 applied.
schema() {
  case "$1" in
    3) "${PSQL[@]}" -c "BEGIN; ALTER TABLE idemgate_records RESET (fillfactor);
         DROP INDEX IF EXISTS idemgate_records_kept_requests;
         CREATE INDEX IF NOT EXISTS idemgate_records_kept ON idemgate_records (lease_expires_at)
           WHERE request IS NOT NULL AND state = 'leased';
         DELETE FROM idemgate_schema WHERE version = 4; COMMIT" ;;
    4) "${PSQL[@]}" -c "BEGIN;" -f "$ROOT/migrations/0004_hot_completion.additive.sql" \
         -c "INSERT INTO idemgate_schema (version, name) VALUES (4, '0004_hot_completion.additive.sql')
             ON CONFLICT DO NOTHING; COMMIT" ;;
  esac
}

stat_sql="SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, n_tup_upd, n_tup_hot_upd, n_tup_ins
          FROM pg_stat_user_tables WHERE relname = 'idemgate_records'"

# Redis (`idemgate-fleet redis`), then the demo upstream and one gateway replica through
# the bench launcher (`idemgate-fleet bench start`, its fixed ports), pointed at this
# script's Redis and Postgres.
start_chain() {
  local bin=$1
  # The launcher's redis-server command line (fleet/src/serve_redis.rs), daemonized.
  # shellcheck disable=SC2086 # REDIS_ARGS is a list of words
  "$FLEET" redis --port "$REDIS_PORT" --dir "$STATE" -- \
    --daemonize yes --pidfile "$STATE/redis.pid" --logfile "$STATE/redis.log" ${REDIS_ARGS:-}
  if [ -n "${WARM:-}" ]; then
    # Once it has loaded its AOF (`-LOADING` until then).
    for _ in $(seq 100); do
      [ "$(redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" = PONG ] && break
      sleep 0.1
    done
    "$FLEET" bench rewarm --port "$REDIS_PORT" >/dev/null
  fi
  local env=()
  for e in ${GW_ENV:-}; do env+=(--env "$e"); done
  "$FLEET" bench start upstream >/dev/null
  "$FLEET" bench start gateways 1 --bin "$bin" "${env[@]}" \
    --env "IDEMGATE__REDIS__URL=redis://127.0.0.1:$REDIS_PORT" \
    --env "IDEMGATE__POSTGRES__URL=postgres://postgres@127.0.0.1:$PGPORT/idemgate" >/dev/null
}

stop_chain() {
  "$FLEET" bench stop gateways upstream >/dev/null 2>&1 || true
  [ -f "$STATE/redis.pid" ] && kill "$(cat "$STATE/redis.pid")" 2>/dev/null || true
  rm -f "$STATE/redis.pid"
  sleep 1
}

run() {
  local tag=$1 bin=$2
  pg_start
  stop_chain
  start_chain "$bin"
  trap stop_chain EXIT
  # Warm up (prepared statements, caches), then measure.
  wrk -t2 -c"$CONNS" -d3s -s "$ROOT/loadtest/bench/wrk.lua" "http://127.0.0.1:$GW_PORT/v1/payments" \
    -- unique "warm-$tag-$RANDOM" >/dev/null
  "${PSQL[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null
  local before cpu0 after cpu1 out
  before=$("${PSQL[@]}" -Atc "$stat_sql")
  cpu0=$(pg_cpu)
  if [ -n "${PERF:-}" ]; then
    # Every Postgres process (backends, WAL writer, checkpointer...) for 5 s mid-run.
    local pids
    pids=$({ pg_pid; pgrep -P "$(pg_pid)"; } | paste -sd,)
    (sleep 2; perf record -q -g -F 999 -o "$STATE/perf-$tag.data" -p "$pids" -- sleep 5 >/dev/null 2>&1) &
  fi
  out=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$ROOT/loadtest/bench/wrk.lua" \
    "http://127.0.0.1:$GW_PORT/v1/payments" -- unique "lev-$tag-$RANDOM" | grep '^{' | tail -1)
  cpu1=$(pg_cpu)
  sleep 0.5
  after=$("${PSQL[@]}" -Atc "$stat_sql")
  "${PSQL[@]}" -c "SELECT calls, rows, round(mean_exec_time::numeric, 3) AS mean_ms,
        round(shared_blks_hit::numeric / calls, 1) AS hit, round(shared_blks_read::numeric / calls, 1) AS read,
        round(shared_blks_dirtied::numeric / calls, 1) AS dirtied, round(wal_bytes / calls) AS wal_b,
        CASE WHEN query LIKE '%''leased'', t,%' THEN 'claim (leases.rs CLAIM)'
             WHEN query LIKE '%''completed'', t, st%' THEN 'write-through (completions.rs)'
             WHEN query LIKE '%CROSS JOIN LATERAL%' THEN 'lookup (lookups.rs)'
             ELSE left(regexp_replace(query, '\s+', ' ', 'g'), 60) END AS statement
      FROM pg_stat_statements WHERE calls > 50 ORDER BY total_exec_time DESC LIMIT 8" \
    >"$STATE/stmts-$tag.txt"
  python3 - "$tag" "$out" "$before" "$after" "$cpu0" "$cpu1" <<'EOF'
import json, sys
tag, out, b, a, c0, c1 = sys.argv[1:]
w = json.loads(out)
n = w["ok_fresh"]
b, a = [list(map(int, x.split("|"))) for x in (b, a)]
upd, hot = a[1] - b[1], a[2] - b[2]
print(f"{tag}: {w.get('requests')} req ({n} first) in wrk; pg cpu {(float(c1) - float(c0)) * 1e6 / n:.1f} us/first, "
      f"wal {(a[0] - b[0]) / n:.0f} B/first, updates {upd / n:.2f}/first, hot {hot / max(upd, 1) * 100:.0f}%, "
      f"inserts {(a[3] - b[3]) / n:.2f}/first")
EOF
  k6 run --quiet -e TARGET="http://127.0.0.1:$GW_PORT" -e RATE="$RATE" -e DURATION="$LAT_DURATION" \
    -e MODE=unique -e PREFIX="lat-$tag-$RANDOM" -e OUT="$STATE/k6-$tag.json" \
    "$ROOT/loadtest/bench/fixed-rate.js" >"$STATE/k6-$tag.log" 2>&1 || true
  python3 - "$tag" "$STATE/k6-$tag.json" <<'EOF'
import json, sys
tag, path = sys.argv[1:]
try:
    d = json.load(open(path))
except Exception as e:
    sys.exit(f"{tag}: no k6 summary ({e})")
print(f"{tag}: k6 {d['rps']:.0f} req/s, p50 {d['p50_ms']:.2f} ms, p99 {d['p99_ms']:.2f} ms, "
      f"max {d.get('max_ms', float('nan')):.1f} ms, failed {d['failed_rate']:.4f}")
EOF
  stop_chain
  trap - EXIT
}

case "${1:-}" in
  seed) seed ;;
  run) run "$2" "$3" ;;
  schema) pg_start; schema "$2" ;;
  stop) stop_chain; pg_stop ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
