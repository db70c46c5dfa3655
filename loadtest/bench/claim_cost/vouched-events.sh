#!/usr/bin/env bash
# Redis per first execution with write-through against vouched claims, through the real
# gateway: the bench's durable Redis (`idemgate-fleet bench start redis`: AOF `appendfsync
# always`, one replica, 4.3 M keys), an empty Postgres and the demo upstream, one gateway
# replica per mode started in turn, wrk (2 threads, 32 connections, unique keys) for 8 s
# after a 3 s warm-up, ROUNDS rounds alternating. Per first execution: the primary's and
# the replica's CPU (INFO cpu), and the primary's socket reads and writes (INFO stats
# `total_reads_processed`, `total_writes_processed`) and `WAIT` calls (commandstats).
#
#   bash loadtest/bench/claim_cost/vouched-events.sh      # ROUNDS=3
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
fleet=$root/target/release/idemgate-fleet
rounds=${ROUNDS:-3}
gw=http://127.0.0.1:$(("$("$fleet" bench ports | python3 -c 'import json, sys; print(json.load(sys.stdin)["gateway_base"])')" + 1))
trap '"$fleet" bench down >/dev/null 2>&1' EXIT
"$fleet" bench start redis >/dev/null
"$fleet" bench start postgres >/dev/null
"$fleet" bench start upstream >/dev/null
cpu() { redis-cli -p "$1" info cpu | awk -F: '/used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
# stat SECTION NAME FIELD: a field of an INFO line (`name:value`, `name:calls=N,...`).
stat() { redis-cli -p 16390 info "$1" | tr -d '\r' | awk -F'[:=,]' -v k="$2" -v f="$3" '$1 == k {print $f}'; }
for i in $(seq "$rounds"); do
  for mode in write_through vouched; do
    "$fleet" bench stop gateways >/dev/null 2>&1 || true
    "$fleet" bench start gateways 1 \
      --env IDEMGATE__POSTGRES__URL=postgres://postgres@127.0.0.1:15490/postgres \
      --env IDEMGATE__POSTGRES__CLAIMS=$mode \
      --env IDEMGATE__POSTGRES__LOOKUP_ON_MISS=when_cold >/dev/null
    sleep 4
    wrk -t2 -c32 -d3s -s "$root/loadtest/bench/wrk.lua" "$gw/v1/payments" -- unique "w-$mode-$i-$RANDOM" >/dev/null
    redis-cli -p 16390 config resetstat >/dev/null
    p0=$(cpu 16390); r0=$(cpu 16394)
    out=$(wrk -t2 -c32 -d8s -s "$root/loadtest/bench/wrk.lua" "$gw/v1/payments" -- unique "m-$mode-$i-$RANDOM" | grep '^{' | tail -1)
    p1=$(cpu 16390); r1=$(cpu 16394)
    n=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["ok_fresh"])' "$out")
    python3 -c 'import sys
m, n, p0, p1, r0, r1, rd, wr, wt = sys.argv[1:]
n = int(n)
print(f"{m}: {n} first executions; per first: primary {(float(p1) - float(p0)) * 1e6 / n:.1f} us, "
      f"replica {(float(r1) - float(r0)) * 1e6 / n:.1f} us, socket reads {int(rd) / n:.2f}, "
      f"writes {int(wr) / n:.2f}, WAIT {int(wt or 0) / n:.2f}")' \
      "$mode-$i" "$n" "$p0" "$p1" "$r0" "$r1" "$(stat stats total_reads_processed 2)" \
      "$(stat stats total_writes_processed 2)" "$(stat commandstats cmdstat_wait 3)"
  done
done
