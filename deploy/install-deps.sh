#!/usr/bin/env bash
# Installs the Debian packages idemgate's tests and local fleet need, only when missing.
# Usage: deploy/install-deps.sh [test|up|image]   (image: only podman and buildah, for `make image`)
set -euo pipefail

# command-or-path:package (g++: libFuzzer, built for the fuzz smoke of `make test`)
want=(redis-server:redis-server /usr/lib/postgresql/15/bin/initdb:postgresql-15 promtool:prometheus /usr/sbin/haproxy:haproxy /usr/sbin/nft:nftables g++:g++ /usr/bin/patroni:patroni /usr/bin/etcd:etcd-server /usr/bin/etcdctl:etcd-client)
if [ "${1:-}" = image ]; then want=(podman:podman buildah:buildah); fi

missing=()
for pair in "${want[@]}"; do
  cmd=${pair%%:*}
  pkg=${pair#*:}
  if [[ $cmd == /* ]]; then [ -x "$cmd" ] || missing+=("$pkg"); else command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg"); fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]} (once per machine)" >&2
start=$(date +%s)
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: installed in $(( $(date +%s) - start ))s" >&2
