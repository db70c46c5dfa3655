#!/usr/bin/env bash
# What one write-through statement costs Postgres besides its records: the CPU of every
# Postgres process (pg-lib.sh's pg_cpu) per inserted record, for statements of N records
# each, on a Postgres of its own that keeps its commits (fsync and synchronous_commit on,
# as `make bench`'s), its records table seeded with SEED_ROWS completed records shaped
# as the gateway's (pg-lib.sh's seed_rows). One pgbench client runs one statement at a
# time, as the gateway's writer does; CPU, commits and WAL (bytes and full-page
# images, pg_stat_wal) are read over a window of SECS seconds in the middle of each run.
# The statement is the completion's INSERT of completed records (the keys made by sha256
# in SQL, a constant per record). Every new record has the same scope, so the inserts
# go to one growing part of the primary key, where the seeded records each have a scope
# of their own.
#
#   bash loadtest/bench/pg-statement-cost.sh setup        # initdb, migrations, seed
#   bash loadtest/bench/pg-statement-cost.sh run 1 2 4 8 16 32
#   bash loadtest/bench/pg-statement-cost.sh stop
#
# Environment: STATE (.state/pgstatement), PGPORT (55990), SEED_ROWS (3000000), SECS (8).
# Runs as root: Postgres runs as the `postgres` account.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${STATE:-$ROOT/.state/pgstatement}
PGPORT=${PGPORT:-55990}
SEED_ROWS=${SEED_ROWS:-3000000}
SECS=${SECS:-8}
PG_CONF="shared_buffers = 1GB
max_wal_size = 4GB
fsync = on
synchronous_commit = on"
Q=(psql -X -q -At -h 127.0.0.1 -p "$PGPORT" -U postgres)
# shellcheck source=loadtest/bench/pg-lib.sh
. "$ROOT/loadtest/bench/pg-lib.sh"

setup() {
  pg_stop >/dev/null 2>&1 || true
  rm -rf "$STATE"
  pg_start
  for f in "$ROOT"/migrations/*.sql; do "${Q[@]}" -f "$f" >/dev/null; done
  # Pages full, as production's completed records leave them (fleet/src/bench/seeded.rs).
  "${Q[@]}" -c "ALTER TABLE idemgate_records SET (fillfactor = 100)"
  "${Q[@]}" -c "INSERT INTO idemgate_records (scope, key_hash, route, fingerprint, state,
      lock_token, status, headers, body, created_at, completed_at, expires_at, replay_until)
    SELECT s, k, 'payments', f, 'completed', t, 200, h, b, now(), now(), e, e
    FROM ($(seed_rows "now() + interval '4 days'")) AS r"
  "${Q[@]}" -c "ALTER TABLE idemgate_records SET (fillfactor = 50)"
  "${Q[@]}" -c "VACUUM ANALYZE idemgate_records"
  "${Q[@]}" -c "CHECKPOINT"
}

commits() { "${Q[@]}" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'"; }
# WAL written so far: bytes and full-page images (pg_stat_wal).
wal() { "${Q[@]}" -F ' ' -c "SELECT wal_bytes, wal_fpi FROM pg_stat_wal"; }

run() {
  for n in "$@"; do
    cat >"$STATE/insert.sql" <<SQL
\set r random(1, 1000000000)
INSERT INTO idemgate_records AS r (scope, key_hash, route, fingerprint, state, lock_token,
  status, headers, body, created_at, completed_at, expires_at, replay_until, origin)
SELECT s, sha256((:r::text || '-' || i || '-' || clock_timestamp()::text)::bytea),
  'payments', s, 'completed', 'tok', 200, h, b, now(), now(),
  now() + interval '1 millisecond' * 86400000, now() + interval '1 millisecond' * 86400000, NULL
FROM generate_series(1, $n) i,
  (SELECT sha256('scope'::bytea) s, decode(repeat('ab', 60), 'hex') h,
          decode(repeat('cd', 150), 'hex') b) c;
SQL
    pgbench -n -M prepared -c 1 -T $((SECS + 3)) -h 127.0.0.1 -p "$PGPORT" -U postgres \
      -f "$STATE/insert.sql" postgres >/dev/null 2>&1 &
    sleep 1.5
    local x0 c0 c1 x1 w0 w1
    x0=$(commits); w0=$(wal); c0=$(pg_cpu); sleep "$SECS"; c1=$(pg_cpu); w1=$(wal); x1=$(commits)
    wait
    # The window's statements (the SELECTs reading the count and the WAL commit too).
    awk -v n="$n" -v tx=$((x1 - x0 - 3)) -v c0="$c0" -v c1="$c1" -v w0="$w0" -v w1="$w1" 'BEGIN {
      split(w0, a, " "); split(w1, b, " "); r = tx * n
      printf "records per statement %2d: %6d statements, Postgres CPU %6.1f us per record, " \
        "%6.1f us per statement, WAL %6.0f bytes and %.2f full-page images per record\n",
        n, tx, (c1 - c0) * 1e6 / r, (c1 - c0) * 1e6 / tx, (b[1] - a[1]) / r, (b[2] - a[2]) / r }'
  done
}

case ${1:-} in
  setup) setup ;;
  run) shift; run "$@" ;;
  stop) pg_stop ;;
  *) echo "usage: $0 setup | run N... | stop" >&2; exit 2 ;;
esac
