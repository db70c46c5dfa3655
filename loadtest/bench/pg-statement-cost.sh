#!/usr/bin/env bash
# What one write-through statement costs Postgres besides its records: the CPU of every
# Postgres process per inserted record, for statements of N records each, on a Postgres
# of its own that keeps its commits (fsync and synchronous_commit on, as `make bench`'s),
# its records table seeded with ROWS completed records. One pgbench client runs one
# statement at a time, as the gateway's writer does; CPU and commits are read over a
# window of SECS seconds in the middle of each run. The statement is the completion's
# INSERT of completed records (the keys made by sha256 in SQL, a constant per record).
#
#   bash loadtest/bench/pg-statement-cost.sh setup        # initdb, migrations, seed
#   bash loadtest/bench/pg-statement-cost.sh run 1 2 4 8 16 32
#   bash loadtest/bench/pg-statement-cost.sh stop
#
# Environment: STATE (/var/tmp/idemgate-pg-statement-cost: the postgres account must
# reach it), PGPORT (55990), ROWS (3000000), SECS (8). Runs as root.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=/usr/lib/postgresql/15/bin
STATE=${STATE:-/var/tmp/idemgate-pg-statement-cost}
PGPORT=${PGPORT:-55990}
ROWS=${ROWS:-3000000}
SECS=${SECS:-8}
Q="psql -X -q -At -h 127.0.0.1 -p $PGPORT -U postgres"
as_pg() { (cd / && setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"); }

setup() {
  rm -rf "$STATE" && mkdir -p "$STATE" && chown postgres "$STATE"
  as_pg "$PGBIN/initdb" -D "$STATE/data" -U postgres -A trust >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$STATE/data" -l "$STATE/log" -w start -o "-p $PGPORT \
    -c listen_addresses=127.0.0.1 -c shared_buffers=1GB -c fsync=on \
    -c synchronous_commit=on -c max_wal_size=4GB" >/dev/null
  for f in "$ROOT"/migrations/*.sql; do $Q -f "$f" >/dev/null; done
  # Pages full, as production's completed records leave them (fleet/src/bench/seeded.rs).
  $Q -c "ALTER TABLE idemgate_records SET (fillfactor = 100)"
  $Q -c "INSERT INTO idemgate_records (scope, key_hash, route, fingerprint, state,
      lock_token, status, headers, body, created_at, completed_at, expires_at, replay_until)
    SELECT sha256(('t' || (i % 91))::bytea), sha256(('k' || i)::bytea), 'payments',
      sha256(('f' || i)::bytea), 'completed', 'tok', 200, decode(repeat('ab', 60), 'hex'),
      decode(repeat('cd', 150), 'hex'), now(), now(), now() + interval '4 days',
      now() + interval '4 days'
    FROM generate_series(1, $ROWS) i"
  $Q -c "ALTER TABLE idemgate_records SET (fillfactor = 50)"
  $Q -c "VACUUM ANALYZE idemgate_records"
  $Q -c "CHECKPOINT"
}

# CPU ticks of every live Postgres process.
cpu() {
  local t=0 s
  for p in $(pgrep -u postgres); do
    s=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
    t=$((t + s))
  done
  echo "$t"
}

commits() { $Q -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'"; }

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
    local x0 c0 c1 x1
    x0=$(commits); c0=$(cpu); sleep "$SECS"; c1=$(cpu); x1=$(commits)
    wait
    # The window's statements (the SELECT reading the count commits too).
    awk -v n="$n" -v tx=$((x1 - x0 - 1)) -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {
      printf "records per statement %2d: %6d statements, Postgres CPU %6.1f us per record, %6.1f us per statement\n",
        n, tx, c / hz * 1e6 / (tx * n), c / hz * 1e6 / tx }'
  done
}

case ${1:-} in
  setup) setup ;;
  run) shift; run "$@" ;;
  stop) as_pg "$PGBIN/pg_ctl" -D "$STATE/data" -m fast stop ;;
  *) echo "usage: $0 setup | run N... | stop" >&2; exit 2 ;;
esac
