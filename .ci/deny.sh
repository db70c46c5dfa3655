#!/usr/bin/env bash
# The supply-chain check of `make lint`: licenses, banned or duplicated crates, and
# sources (crates.io only) of the dependency tree, as deny.toml says. Advisories are
# not checked (deny.toml says why). Installs cargo-deny from crates.io if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo deny --version >/dev/null 2>&1; then
  echo "deny: installing cargo-deny 0.20.2 (once per machine, a few minutes)" >&2
  start=$(date +%s)
  cargo install cargo-deny --locked --version 0.20.2
  echo "deny: cargo-deny installed in $(( $(date +%s) - start ))s" >&2
fi
cargo deny --locked check --hide-inclusion-graph licenses bans sources
