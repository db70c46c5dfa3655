# Sourced by the Postgres benches (pg-levers.sh, pg-shapes.sh): a Postgres of their own
# under $STATE on $PGPORT, run as the `postgres` account, and the CPU it used.
# The caller sets STATE, PGPORT and PG_CONF (lines added to postgresql.conf at initdb).
PGBIN=/usr/lib/postgresql/15/bin

as_pg() { (cd / && setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"); }

# initdb once (with PG_CONF), then start unless it is running.
pg_start() {
  if [ ! -d "$STATE/data" ]; then
    mkdir -p "$STATE" && chown postgres:postgres "$STATE"
    as_pg "$PGBIN/initdb" -D "$STATE/data" -U postgres --auth=trust >/dev/null
    printf 'port = %s\nlisten_addresses = %s\nunix_socket_directories = %s\n%s\n' \
      "$PGPORT" "'127.0.0.1'" "'$STATE'" "$PG_CONF" >>"$STATE/data/postgresql.conf"
  fi
  as_pg "$PGBIN/pg_ctl" -D "$STATE/data" -l "$STATE/postgres.log" -w status >/dev/null 2>&1 ||
    as_pg "$PGBIN/pg_ctl" -D "$STATE/data" -l "$STATE/postgres.log" -w start >/dev/null
}

pg_stop() { as_pg "$PGBIN/pg_ctl" -D "$STATE/data" -w stop >/dev/null; }

# CPU seconds of every Postgres process: the live ones, plus the children the postmaster
# has reaped (its cutime and cstime), so that ended backends and autovacuum workers count.
pg_cpu() {
  local pm tick
  tick=$(getconf CLK_TCK)
  pm=$(head -1 "$STATE/data/postmaster.pid")
  {
    awk '{ sub(/.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pm/stat"
    pgrep -P "$pm" | while read -r p; do
      # A process that ended since pgrep is counted in the postmaster's cutime.
      awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || true
    done
  } | awk -v t="$tick" '{ s += $1 } END { printf "%.4f\n", s / t }'
}
