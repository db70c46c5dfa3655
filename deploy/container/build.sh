#!/usr/bin/env bash
# `make image`: builds the container image from what is on this machine (no registry
# is reachable from the project's machines) and smoke-tests it without `podman run`.
#   1. `cargo build --release --bin idemgate` (reused when up to date);
#   2. a distroless-like runtime base from Debian 12's packages (runtime-base.sh), once;
#   3. `podman build --isolation chroot` of deploy/container/Dockerfile with
#      BINARY_FROM=prebuilt (packages the binary of step 1) and that base;
#   4. inside the image (`buildah run --isolation chroot`): `idemgate --version`,
#      `idemgate check-config` of the bundled idemgate.toml, `idemgate health` failing
#      (exit 1) with nothing listening, then `idemgate serve` against a local Redis and
#      `idemgate health` answering 0; and the image's metadata (user, ports, signal,
#      healthcheck, no shell).
# Environment: IMAGE (default localhost/idemgate:<version>), RUNTIME_BASE.
set -euo pipefail
cd "$(dirname "$0")/../.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
image=${IMAGE:-localhost/idemgate:$version}
base=${RUNTIME_BASE:-localhost/idemgate-distroless:bookworm}
bash .ci/install-deps.sh image
command -v redis-server >/dev/null || bash .ci/install-deps.sh

cargo build --release --locked --bin idemgate
podman image exists "$base" || bash deploy/container/runtime-base.sh "$base"
podman build --isolation chroot --format docker --pull=never -f deploy/container/Dockerfile \
  --build-arg BINARY_FROM=prebuilt --build-arg RUNTIME_BASE="$base" -t "$image" .

echo "image: smoke test of $image" >&2
fail() { echo "image: smoke test FAILED: $*" >&2; exit 1; }
ctr=$(buildah from --pull-never "$image")
work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then
    # The gateway inside the image, found by the admin port it listens on (buildah run
    # may not pass the signal on), then buildah itself.
    for pid in $(ss -ltnpH "sport = :$admin" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
      kill "$pid" 2>/dev/null || true
    done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  if [ -f "$work/redis.pid" ]; then kill "$(cat "$work/redis.pid")" 2>/dev/null || true; fi
  buildah rm "$ctr" >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
run() { buildah run --isolation chroot --network host "$ctr" -- "$@"; }

out=$(run /usr/local/bin/idemgate --version) || fail "--version"
[ "$out" = "idemgate $version" ] || fail "--version said: $out"
run /usr/local/bin/idemgate check-config >"$work/config" || fail "check-config"
grep -q 'listen = "0.0.0.0:8080"' "$work/config" || fail "bundled config not in effect"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis_port=$(free_port) listen=$(free_port) admin=$(free_port)
env=(-e "IDEMGATE__SERVER__LISTEN=127.0.0.1:$listen" -e "IDEMGATE__SERVER__ADMIN_LISTEN=127.0.0.1:$admin"
     -e "IDEMGATE__REDIS__URL=redis://127.0.0.1:$redis_port")
status=0
buildah run --isolation chroot --network host "${env[@]}" "$ctr" -- /usr/local/bin/idemgate health --timeout 1s \
  >/dev/null 2>&1 || status=$?
[ "$status" = 1 ] || fail "health with nothing listening exited $status, want 1"

# A real server inside the image: Redis-only (the bundled config's [postgres] is
# replaced by a minimal config mounted over it), then the HEALTHCHECK command.
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$work/redis.pid" --dir "$work" >/dev/null
printf '[server]\nshutdown_grace = "1s"\n[[routes]]\nname = "p"\npath_prefix = "/"\nupstream = "http://127.0.0.1:9"\nupstream_timeout = "1s"\n' \
  >"$work/idemgate.toml"
chmod 0644 "$work/idemgate.toml"
buildah run --isolation chroot --network host "${env[@]}" -v "$work/idemgate.toml:/etc/idemgate/idemgate.toml:ro" \
  "$ctr" -- /usr/local/bin/idemgate serve >"$work/serve.log" 2>&1 &
server=$!
ok=""
for _ in $(seq 1 50); do
  if buildah run --isolation chroot --network host "${env[@]}" "$ctr" -- /usr/local/bin/idemgate health --timeout 1s \
    >"$work/health" 2>&1; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] || { cat "$work/serve.log" "$work/health" >&2; fail "health never answered 0 for a serving gateway"; }
grep -q '^ready: ' "$work/health" || fail "health said: $(cat "$work/health")"

inspect() { podman image inspect --format "$1" "$image"; }
[ "$(inspect '{{.Config.User}}')" = "65532:65532" ] || fail "user is $(inspect '{{.Config.User}}')"
[ "$(inspect '{{.Config.StopSignal}}')" = "SIGTERM" ] || fail "stop signal"
inspect '{{json .Config.ExposedPorts}}' | grep -q '8080/tcp' || fail "8080 not exposed"
inspect '{{json .Config.ExposedPorts}}' | grep -q '9090/tcp' || fail "9090 not exposed"
inspect '{{json .Config.Env}}' | grep -q 'IDEMGATE_CONFIG=/etc/idemgate/idemgate.toml' || fail "IDEMGATE_CONFIG"
podman image inspect --format '{{json .}}' "$image" | grep -q '"Healthcheck"' || fail "no HEALTHCHECK"
mnt=$(buildah mount "$ctr")
for shell in bin/sh bin/bash usr/bin/curl; do [ ! -e "$mnt/$shell" ] || fail "$shell in the image"; done
buildah umount "$ctr" >/dev/null
echo "image: $image passed the smoke test ($(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=iec) )" >&2
