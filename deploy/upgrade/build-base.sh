#!/usr/bin/env bash
# Builds the previous release's `idemgate` (debug) for the mixed-version test, once:
# the source of the pinned commit (deploy/upgrade/base-commit, or UPGRADE_BASE=<commit>)
# is exported with `git archive` into target/upgrade-base/<commit>/src and built there
# with a target directory of its own (target/upgrade-base/target, shared by every base
# commit and kept, so another base rebuilds only what differs); the binary is kept at
# target/upgrade-base/<commit>/idemgate and reused while present. Prints the binary's path on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
base=${UPGRADE_BASE:-$(cat deploy/upgrade/base-commit)}
if ! commit=$(git rev-parse --verify --quiet "$base^{commit}"); then
  # A shallow clone (CI) may lack it: fetch that one commit.
  git fetch --quiet --depth=1 origin "$base" >&2
  commit=$(git rev-parse --verify "$base^{commit}")
fi
dir=$root/target/upgrade-base/$commit
bin=$dir/idemgate
if [ -x "$bin" ]; then
  echo "upgrade-check: previous binary cached: $bin" >&2
  echo "$bin"
  exit 0
fi
start=$(date +%s)
rm -rf "$dir/src"
mkdir -p "$dir/src"
git archive "$commit" | tar -x -C "$dir/src"
echo "upgrade-check: building $commit (debug) in $dir" >&2
# A debug build without debug info or incremental state: a one-off build, faster to
# link and smaller on disk; its own target directory, so the current build's
# target/debug/idemgate is never overwritten.
(cd "$dir/src" && CARGO_TARGET_DIR=$root/target/upgrade-base/target CARGO_PROFILE_DEV_DEBUG=0 \
  CARGO_INCREMENTAL=0 cargo build --quiet --locked --bin idemgate >&2)
cp "$root/target/upgrade-base/target/debug/idemgate" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$dir/src"
echo "upgrade-check: built $commit in $(( $(date +%s) - start ))s" >&2
echo "$bin"
