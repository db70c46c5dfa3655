#!/usr/bin/env bash
# Postgres CPU per durable first execution for two table shapes, side by side on one
# Postgres of its own, each table seeded with SEED_ROWS completed records (the state
# production runs in), driven by pgbench with the gateway's own batched statements (no
# gateway, no Redis: this measures what Postgres does per record, to choose the shape
# before the gateway is changed; `make bench` measures the chosen one end to end).
#
#   today  (schema 5): one row per record: a claim INSERT, its completion (a HOT
#          UPDATE of the wide row), the reaper's DELETE, and VACUUM of the dead row.
#   update: today's table, the completion an UPDATE of the leased row by key and token
#          instead of an INSERT ... ON CONFLICT DO UPDATE.
#   split: a narrow claim row (the arbiter: same claim statement, no headers or body)
#          and the response appended to a table partitioned by expiry (6 h ranges):
#          the completion is an INSERT there plus a HOT UPDATE of the narrow row;
#          expiry DELETEs narrow rows and DROPs whole response partitions.
#   narrow: today's table and statements with the primary key on `key_hash` alone (it
#          is SHA-256 of scope and key, so unique by itself): 32-byte index entries.
#   lease: the claim in a narrow UNLOGGED `leases` table (no WAL), which the claim
#          statement fills only where the records table holds no unexpired record; the
#          completion marks the lease completed (kept, so that a claim whose snapshot
#          predates the completion still finds it) and inserts the completed record.
#          Expiry deletes as many records and as many leases.
#   onecommit: today's table and statements, the completion of the previous batch
#          riding in the transaction of the next batch's claim: one commit per batch
#          instead of two (what merging the write-through into the claim rounds saves).
#   brin:  today's table and statements, its expiry index a BRIN (a summary per range of
#          pages, no B-tree descent per insert) in place of the B-tree the reaper reads.
#   nolease: the completion's INSERT alone (what `claims = "redis"` writes): the floor
#          of any shape that writes the record once and logs no claim.
#
# SHAPES picks and orders them (default: today onecommit narrow lease nolease).
#
# Per shape and round: N records claimed and completed (two commits per batch of BATCH
# records, as the gateway's claim rounds and write-through batches commit), then the
# same number of expired records removed the shape's way, then VACUUM; the CPU of every
# Postgres process (live ones, and the postmaster's reaped children) is read around each
# phase. Autovacuum is off so that every vacuum is counted in the phase that caused it.
# The index scans of VACUUM are charged as they run here, after N deletes: a real
# autovacuum amortises them over more rows (scale factor 0.2 of a 10M-row table), so
# the `vacuum` column is an upper bound for the shape that deletes wide rows.
#
#   bash loadtest/bench/pg-shapes.sh seed     # initdb on :55433 under .state/pgshapes, seed SHAPES
#   bash loadtest/bench/pg-shapes.sh run      # ROUNDS rounds, SHAPES alternating
#   bash loadtest/bench/pg-shapes.sh stop
#
# Environment: STATE (.state/pgshapes), PGPORT (55433), SEED_ROWS (10000000), N (records
# per phase, 200000), BATCH (16), CLIENTS (8), ROUNDS (3), SHAPES. Runs as root: Postgres runs as
# the `postgres` account (setpriv).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${STATE:-$ROOT/.state/pgshapes}
PGPORT=${PGPORT:-55433}
SEED_ROWS=${SEED_ROWS:-10000000}
N=${N:-200000}
BATCH=${BATCH:-16}
CLIENTS=${CLIENTS:-8}
ROUNDS=${ROUNDS:-3}
SHAPES=${SHAPES:-today onecommit narrow lease nolease}
PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d shapes)
PG_CONF="shared_buffers = 2GB
max_wal_size = 8GB
synchronous_commit = on
autovacuum = off"
# shellcheck source=loadtest/bench/pg-lib.sh
. "$ROOT/loadtest/bench/pg-lib.sh"

# The seeded records (pg-lib.sh), expiring over 30 hours from 6 hours ago: a slice
# already expired, so that every round finds N records to remove.
seed_rows=$(seed_rows "now() - interval '6 hours' + (i::float8 / $SEED_ROWS) * interval '30 hours'")

# today's migrations in `schema`, and SEED_ROWS completed records in its table.
seed_records() {
  local schema=$1 pk=${2:-}
  "${PSQL[@]}" -c "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema"
  for f in "$ROOT"/migrations/0*.sql; do
    "${PSQL[@]}" -c "SET search_path = $schema" -f "$f"
  done
  [ -z "$pk" ] || "${PSQL[@]}" -c "ALTER TABLE $schema.idemgate_records
      DROP CONSTRAINT idemgate_records_pkey, ADD PRIMARY KEY ($pk)"
  # Seeded full, then the migrations' fillfactor back: production's pages end about
  # full (claims, then their HOT completions); seeded half empty, every new claim would
  # land on a different old page and log it whole after each checkpoint.
  "${PSQL[@]}" -c "ALTER TABLE $schema.idemgate_records SET (fillfactor = 100)"
  time "${PSQL[@]}" -c "INSERT INTO $schema.idemgate_records
      (scope, key_hash, route, fingerprint, state, lock_token, status, headers, body,
       created_at, completed_at, expires_at, replay_until, fence)
    SELECT s, k, 'payments', f, 'completed', t, 201, h, b, now(), now(), e, e, 0
    FROM ($seed_rows) AS r"
  "${PSQL[@]}" -c "ALTER TABLE $schema.idemgate_records SET (fillfactor = 50)"
}

seed_split() {
  "${PSQL[@]}" -c "DROP SCHEMA IF EXISTS split CASCADE; CREATE SCHEMA split"
  # split: the narrow arbiter and the responses by expiry.
  "${PSQL[@]}" <<'SQL'
CREATE TABLE split.claims (
    scope bytea NOT NULL, key_hash bytea NOT NULL, fingerprint bytea NOT NULL,
    state "char" NOT NULL, lock_token text, lease_expires_at timestamptz,
    expires_at timestamptz NOT NULL, replay_until timestamptz, completed_at timestamptz,
    fence bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, key_hash)) WITH (fillfactor = 70);
CREATE INDEX claims_expires_at ON split.claims (expires_at);
CREATE TABLE split.responses (
    scope bytea NOT NULL, key_hash bytea NOT NULL, expires_at timestamptz NOT NULL,
    route text NOT NULL, status smallint NOT NULL, headers bytea NOT NULL, body bytea NOT NULL)
  PARTITION BY RANGE (expires_at);
CREATE INDEX responses_key ON split.responses (scope, key_hash);
SQL
  # Six-hour partitions from 12 h ago to 48 h ahead.
  "${PSQL[@]}" -c "DO \$\$ DECLARE t timestamptz := date_trunc('hour', now()) - interval '12 hours';
    BEGIN FOR i IN 0..9 LOOP
      EXECUTE format('CREATE TABLE split.responses_%s PARTITION OF split.responses
                      FOR VALUES FROM (%L) TO (%L)', i, t + i * interval '6 hours',
                      t + (i + 1) * interval '6 hours');
    END LOOP; END \$\$"
  time "${PSQL[@]}" -c "INSERT INTO split.claims
      (scope, key_hash, fingerprint, state, lock_token, expires_at, replay_until, completed_at)
    SELECT s, k, f, 'c', t, e, e, now() FROM ($seed_rows) AS r"
  time "${PSQL[@]}" -c "INSERT INTO split.responses
      SELECT s, k, e, 'payments', 201, h, b FROM ($seed_rows) AS r"
}

# The unlogged leases beside today's records table; a lease lives until its expiry
# plus a margin (`expires_at`), then the reaper deletes it. Production holds the leases
# of the last minute or so; seeded with 300,000 completed ones (more than a round's N
# new ones, so that the table never looks empty to the planner), already expired.
seed_lease() {
  seed_records lease
  seed_leases
}

seed_leases() {
  "${PSQL[@]}" -c "DROP TABLE IF EXISTS lease.leases;
    CREATE UNLOGGED TABLE lease.leases (
      key_hash bytea PRIMARY KEY, scope bytea NOT NULL, fingerprint bytea NOT NULL,
      state \"char\" NOT NULL, lock_token text NOT NULL,
      lease_expires_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
      fence bigint NOT NULL)
    WITH (fillfactor = 70);
    CREATE INDEX leases_expires_at ON lease.leases (expires_at);
    INSERT INTO lease.leases
      SELECT sha256(('lk' || i)::bytea), sha256(('ls' || i)::bytea), sha256(('lf' || i)::bytea),
             'c', md5(i::text), now() - interval '2 minutes', now() - interval '1 minute', 0
      FROM generate_series(1, 300000) AS i"
  "${PSQL[@]}" -c "VACUUM ANALYZE lease.leases"
}

seed() {
  pg_start
  psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -c "CREATE DATABASE shapes" 2>/dev/null || true
  local shape today_seeded=
  for shape in $SHAPES; do
    case $shape in
      # update and onecommit run on today's table.
      today | update | onecommit) [ -n "$today_seeded" ] || { seed_records today; today_seeded=1; } ;;
      narrow) seed_records narrow key_hash ;;
      brin)
        seed_records brin
        "${PSQL[@]}" -c "DROP INDEX brin.idemgate_records_expires_at;
          CREATE INDEX idemgate_records_expires_at ON brin.idemgate_records USING brin (expires_at)" ;;
      lease) seed_lease ;;
      nolease) seed_records nolease ;;
      split) seed_split ;;
      *) echo "unknown shape $shape" >&2; exit 2 ;;
    esac
  done
  time "${PSQL[@]}" -c "VACUUM ANALYZE"
}

# pgbench scripts: BATCH new keys per transaction pair (claim, then completion), keys
# derived from a random 62-bit base so that they never collide with each other or the
# seed. The statements are the gateway's (src/store/postgres/leases.rs CLAIM and
# completions.rs WRITE_THROUGH) with the batch made in SQL instead of bound arrays, and
# prepared once per session (`-M prepared`), as the gateway prepares them.
write_scripts() {
  local keys="FROM generate_series(1, $BATCH) AS i,
       LATERAL (SELECT sha256(('s' || :base)::bytea) AS s,
                       sha256(('k' || :base || '-' || i)::bytea) AS k) AS u"
  cat >"$STATE/today.sql" <<SQL
\set base random(1, 4611686018427387903)
INSERT INTO today.idemgate_records AS r
  (scope, key_hash, route, fingerprint, state, lock_token, lease_expires_at, created_at,
   expires_at, fence, request, completer)
SELECT u.s, u.k, 'payments', sha256(u.k), 'leased', md5(u.k::text),
       now() + interval '30 seconds', now(), now() + interval '24 hours 32 seconds',
       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, NULL, NULL
$keys ORDER BY u.s, u.k
ON CONFLICT (scope, key_hash) DO UPDATE SET
  fence = greatest(r.fence + 1, EXCLUDED.fence), route = EXCLUDED.route,
  fingerprint = EXCLUDED.fingerprint, state = 'leased', lock_token = EXCLUDED.lock_token,
  lease_expires_at = EXCLUDED.lease_expires_at, status = NULL, headers = NULL, body = NULL,
  created_at = now(), completed_at = NULL, expires_at = EXCLUDED.expires_at,
  replay_until = NULL, request = EXCLUDED.request, completer = EXCLUDED.completer
WHERE r.expires_at <= now()
RETURNING r.lock_token, r.fence;
INSERT INTO today.idemgate_records AS r
  (scope, key_hash, route, fingerprint, state, lock_token, status, headers, body,
   created_at, completed_at, expires_at, replay_until)
SELECT u.s, u.k, 'payments', sha256(u.k), 'completed', md5(u.k::text), 201,
       decode(repeat('00', 40), 'hex'), convert_to(repeat(md5(u.k::text), 4) || '"}', 'UTF8'),
       now(), now(), now() + interval '24 hours', now() + interval '24 hours'
$keys ORDER BY u.s, u.k
ON CONFLICT (scope, key_hash) DO UPDATE SET
  state = 'completed', lock_token = EXCLUDED.lock_token, fingerprint = EXCLUDED.fingerprint,
  status = EXCLUDED.status, headers = EXCLUDED.headers, body = EXCLUDED.body,
  completed_at = now(), expires_at = greatest(r.expires_at, EXCLUDED.expires_at),
  replay_until = EXCLUDED.replay_until, request = NULL, completer = NULL
WHERE r.expires_at <= now() OR (r.state = 'leased' AND r.lock_token = EXCLUDED.lock_token)
RETURNING key_hash;
SQL
  # today, its completion an UPDATE of the leased row by key and token instead of an
  # INSERT that conflicts (what the write-through does when it holds the claim).
  sed -n '1,/^RETURNING r.lock_token, r.fence;$/p' "$STATE/today.sql" >"$STATE/update.sql"
  cat >>"$STATE/update.sql" <<SQL
UPDATE today.idemgate_records AS r SET
  state = 'completed', status = 201, headers = decode(repeat('00', 40), 'hex'),
  body = convert_to(repeat(md5(v.k::text), 4) || '"}', 'UTF8'), completed_at = now(),
  replay_until = now() + interval '24 hours', request = NULL, completer = NULL
FROM (SELECT u.s, u.k $keys) AS v
WHERE r.scope = v.s AND r.key_hash = v.k AND r.state = 'leased'
  AND r.lock_token = md5(v.k::text)
RETURNING r.key_hash;
SQL
  cat >"$STATE/split.sql" <<SQL
\set base random(1, 4611686018427387903)
INSERT INTO split.claims AS r
  (scope, key_hash, fingerprint, state, lock_token, lease_expires_at, expires_at, fence)
SELECT u.s, u.k, sha256(u.k), 'l', md5(u.k::text), now() + interval '30 seconds',
       now() + interval '24 hours 32 seconds',
       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$keys ORDER BY u.s, u.k
ON CONFLICT (scope, key_hash) DO UPDATE SET
  fence = greatest(r.fence + 1, EXCLUDED.fence), fingerprint = EXCLUDED.fingerprint,
  state = 'l', lock_token = EXCLUDED.lock_token, lease_expires_at = EXCLUDED.lease_expires_at,
  expires_at = EXCLUDED.expires_at, replay_until = NULL, completed_at = NULL
WHERE r.expires_at <= now()
RETURNING r.lock_token, r.fence;
WITH done AS (
  UPDATE split.claims AS r SET state = 'c', completed_at = now(),
         replay_until = now() + interval '24 hours'
  FROM (SELECT u.s, u.k $keys) AS v
  WHERE r.scope = v.s AND r.key_hash = v.k AND r.state = 'l' AND r.lock_token = md5(v.k::text)
  RETURNING r.scope, r.key_hash, r.expires_at)
INSERT INTO split.responses
SELECT d.scope, d.key_hash, d.expires_at, 'payments', 201, decode(repeat('00', 40), 'hex'),
       convert_to(repeat(md5(d.key_hash::text), 4) || '"}', 'UTF8')
FROM done AS d;
SQL
  # onecommit: one transaction per batch, the claim of this batch's keys and the
  # completion of the previous batch's (pgbench keeps `prev` per client; -D prev=0 at
  # first names keys that do not exist).
  { echo '\set base random(1, 4611686018427387903)'
    echo 'BEGIN;'
    sed -n '2,/^RETURNING r.lock_token, r.fence;$/p' "$STATE/today.sql"
    sed -n '/^RETURNING r.lock_token, r.fence;$/,$p' "$STATE/today.sql" | sed -e '1d' -e 's/:base/:prev/g'
    echo 'COMMIT;'
    echo '\set prev :base'
  } >"$STATE/onecommit.sql"
  # narrow: today's statements, arbitrated by the key hash alone.
  sed -e 's/today\./narrow./g' -e 's/ON CONFLICT (scope, key_hash)/ON CONFLICT (key_hash)/' \
    -e 's/ORDER BY u.s, u.k/ORDER BY u.k/' "$STATE/today.sql" >"$STATE/narrow.sql"
  sed -e 's/today\./brin./g' "$STATE/today.sql" >"$STATE/brin.sql"
  # nolease: today's completion alone, into a table of its own.
  { echo '\set base random(1, 4611686018427387903)'
    sed -n '/^RETURNING r.lock_token, r.fence;$/,$p' "$STATE/today.sql" | sed -e '1d' -e 's/today\./nolease./g'
  } >"$STATE/nolease.sql"
  # lease: the claim is a lease row where no unexpired record exists (the gateway would
  # read the record in the same statement to answer a duplicate; a first execution finds
  # none); the completion marks the lease with its token and inserts the record.
  cat >"$STATE/lease.sql" <<SQL
\set base random(1, 4611686018427387903)
INSERT INTO lease.leases AS l
  (key_hash, scope, fingerprint, state, lock_token, lease_expires_at, expires_at, fence)
SELECT u.k, u.s, sha256(u.k), 'l', md5(u.k::text), now() + interval '30 seconds',
       now() + interval '60 seconds',
       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$keys WHERE NOT EXISTS (SELECT 1 FROM lease.idemgate_records r
                         WHERE r.scope = u.s AND r.key_hash = u.k AND r.expires_at > now())
ORDER BY u.k
ON CONFLICT (key_hash) DO UPDATE SET
  fence = greatest(l.fence + 1, EXCLUDED.fence), scope = EXCLUDED.scope,
  fingerprint = EXCLUDED.fingerprint, state = 'l', lock_token = EXCLUDED.lock_token,
  lease_expires_at = EXCLUDED.lease_expires_at, expires_at = EXCLUDED.expires_at
WHERE l.lease_expires_at <= now() AND l.state = 'l'
RETURNING l.lock_token, l.fence;
WITH done AS (
  UPDATE lease.leases AS l SET state = 'c'
  FROM (SELECT u.s, u.k $keys) AS v
  WHERE l.key_hash = v.k AND l.state = 'l' AND l.lock_token = md5(v.k::text)
  RETURNING l.scope, l.key_hash, l.fingerprint, l.lock_token)
INSERT INTO lease.idemgate_records AS r
  (scope, key_hash, route, fingerprint, state, lock_token, status, headers, body,
   created_at, completed_at, expires_at, replay_until)
SELECT d.scope, d.key_hash, 'payments', d.fingerprint, 'completed', d.lock_token, 201,
       decode(repeat('00', 40), 'hex'), convert_to(repeat(md5(d.key_hash::text), 4) || '"}', 'UTF8'),
       now(), now(), now() + interval '24 hours', now() + interval '24 hours'
FROM done AS d ORDER BY d.scope, d.key_hash
ON CONFLICT (scope, key_hash) DO UPDATE SET
  state = 'completed', lock_token = EXCLUDED.lock_token, fingerprint = EXCLUDED.fingerprint,
  status = EXCLUDED.status, headers = EXCLUDED.headers, body = EXCLUDED.body,
  completed_at = now(), expires_at = EXCLUDED.expires_at, replay_until = EXCLUDED.replay_until
WHERE r.expires_at <= now()
RETURNING key_hash;
SQL
}

# The reaper's statement (src/store/postgres/reaper.rs) on `table`, in batches of 1000
# until N rows are gone, each batch its own transaction, from one session; `expired`
# says which rows may go (the reaper's own condition by default).
reap() {
  local table=$1 expired=${2:-expires_at <= now()}
  for _ in $(seq $((N / 1000))); do
    echo "DELETE FROM $table WHERE ctid IN (SELECT ctid FROM $table
          WHERE $expired ORDER BY expires_at LIMIT 1000);"
  done | "${PSQL[@]}"
}

# One shape's round: N records in, N expired records out, VACUUM; prints the CPU µs per
# record of each phase and their sum.
round() {
  local shape=$1 c0 c1 c2 c3 tx
  tx=$((N / BATCH / CLIENTS))
  c0=$(pg_cpu)
  as_pg "$PGBIN/pgbench" -n -M prepared -D prev=0 -h 127.0.0.1 -p "$PGPORT" -U postgres -c "$CLIENTS" -j 2 -t "$tx" \
    -f "$STATE/$shape.sql" shapes >"$STATE/pgbench-$shape.log" 2>&1
  c1=$(pg_cpu)
  # The shape's record table: the reaper's statement (src/store/postgres/reaper.rs),
  # batch 1000, takes N rows from it, then VACUUM. split: narrow claims; the responses
  # of those records go with their partition (below). lease: also the round's completed
  # leases (their margin not waited for: the cost of deleting them is what is charged).
  local table
  case $shape in
    today | update | onecommit) table=today.idemgate_records ;;
    split) table=split.claims ;;
    *) table=$shape.idemgate_records ;;
  esac
  reap "$table"
  [ "$shape" != lease ] || reap lease.leases "state = 'c'"
  c2=$(pg_cpu)
  "${PSQL[@]}" -c "VACUUM $table$([ "$shape" != lease ] || echo ', lease.leases')"
  c3=$(pg_cpu)
  local drop=0
  if [ "$shape" = split ]; then
    # An expired partition, detached and dropped: its cost per row it held (none left
    # once the seeded ones are gone: the column says 0.0 then).
    local part rows d0 d1
    part=$("${PSQL[@]}" -At -c "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'split.responses'::regclass
               AND pg_relation_size(c.oid) > 0 AND substring(pg_get_expr(c.relpartbound, c.oid)
                   FROM 'TO \(''([^'']+)''\)')::timestamptz <= now()
             ORDER BY c.relname LIMIT 1")
    [ -n "$part" ] || part=none
    rows=0
    [ "$part" = none ] || rows=$("${PSQL[@]}" -At -c "SELECT count(*) FROM split.$part")
    d0=$(pg_cpu)
    [ "$part" = none ] ||
      "${PSQL[@]}" -c "ALTER TABLE split.responses DETACH PARTITION split.$part; DROP TABLE split.$part"
    d1=$(pg_cpu)
    drop=$(awk -v a="$d0" -v b="$d1" -v r="$rows" 'BEGIN { printf "%.3f", r ? (b - a) * 1e6 / r : 0 }')
    # An empty partition at the far end, so that the table keeps covering what comes.
    "${PSQL[@]}" -c "DO \$\$ DECLARE hi timestamptz; BEGIN
        SELECT max(to_timestamp(substring(pg_get_expr(c.relpartbound, c.oid)
                 FROM 'TO \(''([^'']+)''\)'), 'YYYY-MM-DD HH24:MI:SS')) INTO hi
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'split.responses'::regclass;
        EXECUTE format('CREATE TABLE split.%I PARTITION OF split.responses FOR VALUES FROM (%L) TO (%L)',
                       'responses_' || extract(epoch FROM hi)::bigint, hi, hi + interval '6 hours');
      END \$\$"
  fi
  awk -v s="$shape" -v n="$N" -v a="$c0" -v b="$c1" -v c="$c2" -v d="$c3" -v dr="$drop" \
    -v tps="$(grep -o 'tps = [0-9.]*' "$STATE/pgbench-$shape.log" | head -1 | cut -d' ' -f3)" \
    -v bt="$BATCH" 'BEGIN {
      w = (b - a) * 1e6 / n; x = (c - b) * 1e6 / n; v = (d - c) * 1e6 / n;
      printf "| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", s, tps * bt, w, x, v, dr, w + x + v + dr }'
}

run() {
  pg_start
  write_scripts
  echo "| shape | records/s | claim + completion µs | expiry µs | vacuum µs | partition drop µs | total µs |"
  echo "|---|---|---|---|---|---|---|"
  for r in $(seq "$ROUNDS"); do
    for shape in $SHAPES; do round "$shape"; done
  done
  "${PSQL[@]}" -c "SELECT n.nspname || '.' || c.relname AS relation, pg_size_pretty(pg_total_relation_size(c.oid)) AS total,
                          pg_size_pretty(pg_indexes_size(c.oid)) AS indexes
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname IN ('today', 'narrow', 'brin', 'lease', 'nolease', 'split')
                     AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1"
  "${PSQL[@]}" -c "SELECT schemaname || '.' || relname AS relation, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
                   FROM pg_stat_user_tables
                   WHERE schemaname IN ('today', 'narrow', 'brin', 'lease', 'nolease', 'split')
                     AND relname IN ('idemgate_records', 'claims', 'leases') ORDER BY 1"
  "${PSQL[@]}" -At -c "SELECT 'split.responses', pg_size_pretty(sum(pg_total_relation_size(inhrelid)))
                       FROM pg_inherits WHERE inhparent = to_regclass('split.responses')"
}

case "${1:-}" in
  seed) seed ;;
  seed-leases) pg_start; seed_leases ;; # the lease shape's leases alone, afresh
  run) run ;;
  stop) pg_stop ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
