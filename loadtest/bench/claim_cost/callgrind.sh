#!/bin/bash
# Instructions per EVALSHA of one claim-script variant: a redis-server of its
# own under valgrind callgrind, counting inside evalShaCommand only; repeatable.
#   bash callgrind.sh VARIANT SCRIPT.lua CALLS     (variants: see stats.py; needs the
#   release launcher, cargo build --release -p idemgate-fleet, or FLEET_BIN)
v=$1; s=$2; n=$3; port=$((17900 + RANDOM % 90)); d=$(mktemp -d)
# The launcher's redis-server command line (fleet/src/serve_redis.rs), under valgrind.
fleet=${FLEET_BIN:-$(cd "$(dirname "$0")/../../.." && pwd)/target/release/idemgate-fleet}
"$fleet" redis --port $port --dir $d \
  --under "valgrind --tool=callgrind --callgrind-out-file=$d/out --collect-atstart=no --toggle-collect=evalShaCommand" \
  > $d/log 2>&1 &
vp=$!
for i in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.2; done
python3 "$(dirname "$0")/one.py" $port $v $n $s
redis-cli -p $port shutdown nosave >/dev/null 2>&1; wait $vp
ir=$(grep -m1 "^summary:\|^totals:" $d/out | awk '{print $2}')
echo "$v $s n=$n Ir/evalsha=$((ir / n))"
rm -rf "$d"
