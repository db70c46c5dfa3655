#!/usr/bin/env bash
# Instructions Redis spends inside EVALSHA per first execution (one vouched claim of a new
# key, then its completion) for the Lua scripts of two git revisions: each variant gets a
# redis-server of its own (the launcher's command line) under valgrind callgrind,
# counting inside evalShaCommand only (the commands the scripts call included), so the
# figure repeats to within about 0.5% where CPU time on a shared machine does not.
#
#   bash loadtest/bench/claim_cost/pair-callgrind.sh REV:TTL REV:TTL [PAIRS]
#   e.g. bash loadtest/bench/claim_cost/pair-callgrind.sh b4d36a3:30000 HEAD:90000 20000
#
# TTL is the claim's ARGV[3] as that revision's gateway sends it for a 30 s lease with
# 60 s remembered after it (ARGV[9]): the lease alone up to b4d36a3, their sum since.
# The arguments are shaped as the gateway's (src/store/redis/claim.rs, complete.rs): a
# 32-byte fingerprint, 32-hex token, 300-byte response, the epoch marker "0" and a
# warmth marker two days old written by this server (the steady state).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
fleet=${FLEET_BIN:-$root/target/release/idemgate-fleet}
[[ -x $fleet ]] || (cd "$root" && cargo build --release -q -p idemgate-fleet)
pairs=${3:-20000}

# run REV:TTL BASE: a port of BASE..BASE+89, so the two runs at once never share one.
run() {
  local rev=${1%%:*} ttl=${1##*:} port=$(($2 + RANDOM % 90)) d
  d=$(mktemp -d)
  for f in record claim complete; do git -C "$root" show "$rev:lua/$f.lua" >"$d/$f.lua"; done
  cat "$d/record.lua" "$d/claim.lua" >"$d/claim-full.lua"
  cat "$d/record.lua" "$d/complete.lua" >"$d/complete-full.lua"
  "$fleet" redis --port "$port" --dir "$d" --under "valgrind --tool=callgrind \
    --callgrind-out-file=$d/out --collect-atstart=no --toggle-collect=evalShaCommand" \
    >"$d/log" 2>&1 &
  local vp=$!
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  redis-cli -p "$port" eval "redis.call('SET', KEYS[1], ARGV[1]) redis.set_repl(redis.REPL_NONE)
    redis.call('APPEND', KEYS[1], '') return 1" 1 '{m}' $(($(date +%s%3N) - 172800000)) >/dev/null
  redis-cli -p "$port" set '{e}' 0 >/dev/null
  local claim complete
  claim=$(redis-cli -p "$port" -x script load <"$d/claim-full.lua")
  complete=$(redis-cli -p "$port" -x script load <"$d/complete-full.lua")
  python3 - "$claim" "$complete" "$ttl" "$pairs" >"$d/pairs.resp" <<'PY'
import sys
def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
claim, complete, ttl, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fp, body = bytes(range(32)), b"r" * 300
for i in range(n):
    rec, tok = "q:{%d}" % i, "%032x" % i
    sys.stdout.buffer.write(enc("EVALSHA", claim, 4, rec, rec + ":n", "{m}", "{e}", fp, tok, ttl,
        "clock", 86400000, "", 60000, 0, 60000))
    sys.stdout.buffer.write(enc("EVALSHA", complete, 1, rec, tok, body, 86400000, fp,
        rec + ":done", "PUBLISH", ""))
PY
  local piped
  piped=$(redis-cli -p "$port" --pipe <"$d/pairs.resp" | tail -1)
  [[ $piped == *"errors: 0,"* ]] || { echo "$rev: $piped" >&2; exit 1; }
  [[ $(redis-cli -p "$port" get 'q:{0}' | head -c 1) == C ]] || { echo "$rev: not completed" >&2; exit 1; }
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$vp" || true
  local ir
  ir=$(grep -m1 '^summary:\|^totals:' "$d/out" | awk '{print $2}')
  echo "$rev ($ttl): $((ir / pairs)) instructions per claim + completion ($pairs pairs)"
  rm -rf "$d"
}
run "$1" 17800 &
first=$!
run "$2" 17900
wait "$first"
