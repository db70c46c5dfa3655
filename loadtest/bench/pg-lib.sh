# Sourced by the Postgres benches (pg-levers.sh, pg-shapes.sh): a Postgres of their own
# under $STATE on $PGPORT, started and stopped through the launcher
# (`idemgate-fleet postgres`, fleet/src/serve_postgres.rs: initdb once, as the `postgres`
# account), the CPU it used, and the records they seed.
# The caller sets ROOT, STATE, PGPORT and PG_CONF (lines added to postgresql.conf at
# initdb); FLEET_BIN names the launcher (default: the release build).
PGBIN=/usr/lib/postgresql/15/bin
FLEET=${FLEET_BIN:-$ROOT/target/release/idemgate-fleet}

as_pg() { (cd / && setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"); }

# initdb once (with PG_CONF), then start unless it is running.
pg_start() { "$FLEET" postgres up --state "$STATE" --port "$PGPORT" --conf "$PG_CONF"; }

pg_stop() { "$FLEET" postgres down --state "$STATE"; }

# The postmaster's pid.
pg_pid() { head -1 "$("$FLEET" postgres data --state "$STATE")/postmaster.pid"; }

# CPU seconds of every Postgres process: the live ones, plus the children the postmaster
# has reaped (its cutime and cstime), so that ended backends and autovacuum workers count.
pg_cpu() {
  local pm tick
  tick=$(getconf CLK_TCK)
  pm=$(pg_pid)
  {
    awk '{ sub(/.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pm/stat"
    pgrep -P "$pm" | while read -r p; do
      # A process that ended since pgrep is counted in the postmaster's cutime.
      awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || true
    done
  } | awk -v t="$tick" '{ s += $1 } END { printf "%.4f\n", s / t }'
}

# A SELECT of SEED_ROWS completed records shaped as the gateway writes them, columns s
# (32-byte scope), k (key hash), f (fingerprint), t (lock token), h (a 40-byte header
# block), b (a ~150-byte body) and e (expiry: the SQL expression $1, over row i).
seed_rows() {
  echo "SELECT sha256(('s' || i)::bytea) AS s, sha256(('k' || i)::bytea) AS k,
       sha256(('f' || i)::bytea) AS f, md5(i::text) AS t,
       decode(repeat('00', 40), 'hex') AS h,
       convert_to('{\"id\":\"' || md5(i::text) || '\",\"amount\":100,\"currency\":\"eur\",'
                  || '\"status\":\"accepted\",\"created\":\"2026-11-26T18:00:00Z\",\"x\":\"'
                  || md5((i + 1)::text) || '\"}', 'UTF8') AS b,
       $1 AS e
     FROM generate_series(1, $SEED_ROWS) AS i"
}
