#!/usr/bin/env bash
# Builds the previous release's `idemgate` once: the source of the pinned commit
# (tests/upgrade/base-commit, or UPGRADE_BASE=<commit>) is exported with `git archive`
# into target/upgrade-base/<commit>/src and built there with a target directory of its
# own (target/upgrade-base/target, shared by every base commit and both profiles, and
# kept, so another base rebuilds only what differs). Prints the binary's path on stdout.
#
# BASE_PROFILE=debug (the default): for the mixed-version test (`make upgrade-check`),
# kept at target/upgrade-base/<commit>/idemgate. BASE_PROFILE=release: for `make bench`'s
# rows against the last release (loadtest/bench/run.sh), kept at
# target/upgrade-base/<commit>/idemgate-release. Either is reused while present.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
base=${UPGRADE_BASE:-$(cat tests/upgrade/base-commit)}
profile=${BASE_PROFILE:-debug}
case $profile in
  debug) suffix= ;;
  release) suffix=-release ;;
  *) echo "build-base: BASE_PROFILE must be debug or release (got '$profile')" >&2; exit 2 ;;
esac
if ! commit=$(git rev-parse --verify --quiet "$base^{commit}"); then
  # A shallow clone (CI) may lack it: fetch that one commit.
  git fetch --quiet --depth=1 origin "$base" >&2
  commit=$(git rev-parse --verify "$base^{commit}")
fi
dir=$root/target/upgrade-base/$commit
bin=$dir/idemgate$suffix
tag=$([ "$profile" = release ] && echo bench || echo upgrade-check)
if [ -x "$bin" ]; then
  echo "$tag: previous binary ($profile) cached: $bin" >&2
  echo "$bin"
  exit 0
fi
start=$(date +%s)
# A source directory per profile, so two builds of one commit never share it.
src=$dir/src$suffix
rm -rf "$src"
mkdir -p "$src"
git archive "$commit" | tar -x -C "$src"
echo "$tag: building $commit ($profile) in $dir" >&2
export CARGO_TARGET_DIR=$root/target/upgrade-base/target
if [ "$profile" = release ]; then
  # The profile the bench measures the current tree with (`cargo build --release`).
  (cd "$src" && cargo build --quiet --locked --release --bin idemgate >&2)
else
  # A debug build without debug info or incremental state: a one-off build, faster to
  # link and smaller on disk; its own target directory, so the current build's
  # target/debug/idemgate is never overwritten.
  (cd "$src" && CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 \
    cargo build --quiet --locked --bin idemgate >&2)
fi
cp "$CARGO_TARGET_DIR/$profile/idemgate" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$src"
echo "$tag: built $commit ($profile) in $(( $(date +%s) - start ))s" >&2
echo "$bin"
