#!/usr/bin/env bash
# Installs the real gRPC client and server the gRPC tests drive (grpcio from PyPI) into
# a virtualenv outside the checkout, once per machine; prints its python.
# Where: $IDEMGATE_GRPC_TOOLS, default ~/.cache/idemgate/grpc-tools (tests/it/support/grpc.rs
# reads the same variable). Run by `make test` (tests/run.sh) before `cargo test`.
set -euo pipefail
tools=${IDEMGATE_GRPC_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/idemgate/grpc-tools}
pins=(grpcio==1.85.1)
if ! [ -f "$tools/.installed" ] || [ "$(cat "$tools/.installed")" != "${pins[*]}" ]; then
  echo "grpc-tools: installing ${pins[*]} into $tools (once per machine)" >&2
  start=$(date +%s)
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
  echo "${pins[*]}" >"$tools/.installed"
  echo "grpc-tools: installed in $(( $(date +%s) - start ))s" >&2
fi
echo "$tools/bin/python"
