#!/usr/bin/env bash
# What Redis spends per first claim: the claim script (vouched, and write-through)
# against the one native command that could take a lease, `SET key value NX PX ms GET`
# (Redis 6.2+: "yours" or the holder's record), on the bench's durable Redis (AOF
# `appendfsync always`, `noeviction`, one replica; started through the launcher:
# `idemgate-fleet bench start redis`). redis-benchmark drives each variant with
# CLIENTS connections for CALLS calls on fresh random keys; per call, the primary's and
# the replica's CPU (INFO cpu, user + sys) and the time inside the command
# (commandstats). Rounds alternate the variants; the medians are printed last. The calls
# go to a database of their own beside the bench's records (a Redis in production state).
#
#   bash loadtest/bench/claim_cost/native-claim.sh        # ROUNDS=3 CALLS=200000 CLIENTS=32
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
fleet=$root/target/release/idemgate-fleet
[[ -x $fleet ]] || (cd "$root" && cargo build --release -q -p idemgate-fleet)
ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-200000}
CLIENTS=${CLIENTS:-32}
primary=$("$fleet" bench ports | python3 -c 'import json,sys; print(json.load(sys.stdin)["redis"])')
replica=$("$fleet" bench ports | python3 -c 'import json,sys; print(json.load(sys.stdin)["redis_replica"])')
"$fleet" bench start redis >&2
trap 'redis-cli -p "$primary" -n 9 flushdb >/dev/null 2>&1; "$fleet" bench stop redis >/dev/null 2>&1 || true' EXIT

# Database 9, emptied at the end: the bench's records (database 0) stay as they are.
DB=9
cli() { redis-cli -p "$1" -n "$DB" "${@:2}"; }
cpu() { cli "$1" info cpu | awk -F: '/used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
# The claim script as the gateway loads it: record.lua prepended (src/store/redis/mod.rs).
sha=$(cli "$primary" script load "$(cat "$root/lua/record.lua" "$root/lua/claim.lua")")
fp=$(printf 'f%.0s' {1..32})
token=$(printf 't%.0s' {1..32})
# A vouched deployment's markers: epoch "0", warmth two days old and this process's own.
cli "$primary" set "b:epoch" 0 >/dev/null
cli "$primary" set "b:warm" $(( $(date +%s%3N) - 172800000 )) >/dev/null
cli "$primary" append "b:warm" "" >/dev/null
record="L0 ${fp} ${token}1795949103826486 86400000"

# The arguments as src/store/redis/claim.rs sends them (EMPTY: an empty argument).
# Write-through claims read the epoch marker too (a fleet may mix modes); without it
# (Redis alone) the script reads neither marker.
declare -A variants=(
  [script-vouched]="evalsha $sha 4 b:__rand_int__ b:f b:warm b:epoch $fp $token 86430000 clock 86400000 string 40000 0 86400000"
  [script-write-through]="evalsha $sha 4 b:__rand_int__ b:f b:warm b:epoch $fp $token 30000 0 EMPTY string 40000 0"
  [script-no-markers]="evalsha $sha 2 b:__rand_int__ b:f $fp $token 30000 0 EMPTY string"
  [native-set-nx-px-get]="set b:__rand_int__ RECORD NX PX 86430000 GET"
)
declare -A results
for round in $(seq 1 "$ROUNDS"); do
  for v in script-vouched script-write-through script-no-markers native-set-nx-px-get; do
    read -r -a args <<<"${variants[$v]}"
    for i in "${!args[@]}"; do
      [[ ${args[$i]} == RECORD ]] && args[$i]=$record
      [[ ${args[$i]} == EMPTY ]] && args[$i]=
    done
    cli "$primary" config resetstat >/dev/null
    p0=$(cpu "$primary"); r0=$(cpu "$replica")
    redis-benchmark -p "$primary" --dbnum "$DB" -c "$CLIENTS" -n "$CALLS" -r 1000000000 -q "${args[@]}" >/dev/null 2>&1
    # The replica applies what it was sent: wait until it caught up.
    for _ in $(seq 50); do
      [[ $(cli "$primary" info replication | grep -c "lag=0") -ge 1 ]] && break; sleep 0.1
    done
    sleep 1
    p1=$(cpu "$primary"); r1=$(cpu "$replica")
    inside=$(cli "$primary" info commandstats |
      awk -F'[=,:]' -v c="$([[ $v == native* ]] && echo set || echo evalsha)" \
        '$1 == "cmdstat_" c {print $7}')
    line=$(python3 -c "print(f'{($p1-$p0)*1e6/$CALLS:.1f} {($r1-$r0)*1e6/$CALLS:.1f} {$inside:.1f}')")
    results[$v]+="$line;"
    echo "round $round $v: primary / replica CPU µs per call, µs inside the command: $line" >&2
  done
done
echo "medians over $ROUNDS rounds ($CALLS calls, $CLIENTS connections): primary CPU, replica CPU, inside the command (µs per call)"
for v in script-vouched script-write-through script-no-markers native-set-nx-px-get; do
  python3 - "$v" "${results[$v]}" <<'EOF'
import statistics, sys
rows = [list(map(float, r.split())) for r in sys.argv[2].split(";") if r]
med = [statistics.median(c) for c in zip(*rows)]
print(f"{sys.argv[1]:22} {med[0]:6.1f} {med[1]:6.1f} {med[2]:6.1f}")
EOF
done
