#!/usr/bin/env bash
# `make upgrade-check`: the mixed-version test (tests/it/binary/upgrade/). Builds the previous
# release's binary once (tests/upgrade/build-base.sh: the commit in
# tests/upgrade/base-commit, or UPGRADE_BASE=<commit>), then runs the previous and the
# current binary in one fleet on one Redis and one Postgres behind HAProxy.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
previous=$(bash tests/upgrade/build-base.sh)
built=$(date +%s)
IDEMGATE_PREVIOUS_BIN=$previous cargo test --quiet --test it -- --ignored --nocapture upgrade:: upgrade_vouched::
echo "upgrade-check: previous binary $(( built - start ))s, test (with the current build) $(( $(date +%s) - built ))s" >&2
