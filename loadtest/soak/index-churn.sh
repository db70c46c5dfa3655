#!/usr/bin/env bash
# The records table and its indexes under the soak's churn for hours instead of the
# soak's 30 minutes, in minutes of wall time: does the index size level off?
#
# The soak's workload, replayed in SQL on the soak's Postgres settings (`idemgate-fleet
# bench start postgres`, schema from `idemgate migrate`), on a simulated clock of
# 15-second ticks. Each tick: RATE * 15 claims of random keys under one tenant's scope
# (the claim's insert: leased, expiring after the lease plus the ttl), their completions
# (an update of no indexed column, as the write-through's), and every second tick the
# reaper's delete of what expired; a VACUUM every 4 ticks, about as often as autovacuum
# ran during the soak. Every 4 simulated minutes it prints the table's and each index's
# size and the live rows. What it leaves out: replays (reads), the Redis side, and
# timing (nothing waits).
#
#   bash loadtest/soak/index-churn.sh [HOURS]     # default 6; needs `cargo build --release --bins`
#
# Environment: RATE (first executions per second, default 210 = the soak's 300 req/s at
# 70%), LIVE_S (seconds a record lives: lease 30 s + ttl 3 m = 210).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
HOURS=${1:-6}
RATE=${RATE:-210}
LIVE_S=${LIVE_S:-210}
FLEET=$ROOT/target/release/idemgate-fleet
IDEMGATE=$ROOT/target/release/idemgate
[[ -x $FLEET && -x $IDEMGATE ]] || { echo "build first: cargo build --release --bins" >&2; exit 1; }

"$FLEET" bench start postgres >/dev/null
trap '"$FLEET" bench stop postgres >/dev/null' EXIT
port=$("$FLEET" bench ports | python3 -c 'import json, sys; print(json.load(sys.stdin)["postgres"])')
url="postgres://postgres@127.0.0.1:$port/postgres"
config=$(mktemp --suffix=.toml)
printf '[postgres]\nurl = "%s"\n[[routes]]\nname = "payments"\npath_prefix = "/v1/"\nupstream = "http://127.0.0.1:9"\n' \
    "$url" >"$config"
"$IDEMGATE" migrate --config "$config" >&2
rm -f "$config"

python3 - "$HOURS" "$RATE" "$LIVE_S" <<'EOF' | psql -X -q -At -F ' ' -v ON_ERROR_STOP=1 "$url"
import sys
hours, rate, live = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
per_tick = rate * 15
t0 = "timestamptz '2030-01-01 00:00:00+00'"
sizes = """SELECT {m}, pg_relation_size('idemgate_records') / 1048576.0,
  pg_relation_size('idemgate_records_pkey') / 1048576.0,
  pg_relation_size('idemgate_records_expires_at') / 1048576.0,
  pg_relation_size('idemgate_records_kept_requests') / 1048576.0,
  (SELECT count(*) FROM idemgate_records);"""
print("SELECT 'minute table_mb pkey_mb expires_at_mb kept_requests_mb live';")
# The completions reach their rows by primary key, as the write-through's do (a join that
# scanned the table would prune every page it reads).
print("SET enable_hashjoin = off; SET enable_mergejoin = off;")
scope = "sha256('soak-tenant'::bytea)"
for tick in range(int(hours * 240) + 1):
    now = f"{t0} + interval '{tick * 15} seconds'"
    # The tick's keys, claimed, then completed by key as the write-through does (an
    # update of no indexed column).
    print(f"""CREATE TEMP TABLE tick AS SELECT {scope} AS scope,
      sha256(('k{tick}-' || g || random())::bytea) AS key_hash, g FROM generate_series(1, {per_tick}) g;""")
    print(f"""INSERT INTO idemgate_records (scope, key_hash, route, fingerprint, state, lock_token,
      lease_expires_at, created_at, expires_at, fence)
    SELECT scope, key_hash, 'payments', sha256(('f' || g)::bytea), 'leased', md5(g::text || random()),
      {now} + interval '30 seconds', {now}, {now} + interval '{live} seconds', g FROM tick;""")
    print(f"""UPDATE idemgate_records r SET state = 'completed', status = 201,
      headers = decode(repeat('00', 40), 'hex'), body = convert_to(repeat('x', 150), 'UTF8'),
      completed_at = {now}, request = NULL
    FROM tick t WHERE r.scope = t.scope AND r.key_hash = t.key_hash;""")
    print("DROP TABLE tick;")
    if tick % 2 == 0:
        print(f"DELETE FROM idemgate_records WHERE expires_at <= {now};")
    if tick % 4 == 0:
        print("VACUUM idemgate_records;")
    if tick % 16 == 0:
        print(sizes.format(m=tick // 4))
EOF
