#!/usr/bin/env bash
# Runs the fuzz targets (fuzz_targets/, cargo-fuzz + libFuzzer), each for FUZZ_SECONDS
# (default 60), from the committed seeds in corpus/<target>/ plus what earlier runs
# found (target/corpus/<target>/, not committed). Usage: fuzz/run.sh [target...]
# (default: every target). Stops at the first crash: libFuzzer's report, and the input
# saved in fuzz/artifacts/<target>/ (docs/development.md, "Fuzzing", says how to make it a test).
#
# Toolchain: libFuzzer needs nightly compiler flags (-Z sanitizer, sanitizer coverage).
# A nightly toolchain is used if rustup has one (FUZZ_TOOLCHAIN=... picks another);
# otherwise stable with RUSTC_BOOTSTRAP=1, which lets stable take those flags.
# Installs cargo-fuzz (from crates.io) if missing.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${FUZZ_SECONDS:-60}
toolchain=${FUZZ_TOOLCHAIN:-}
if [ -z "$toolchain" ]; then
  if command -v rustup >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
    toolchain=nightly
  else
    toolchain=stable
  fi
fi
cargo=(cargo)
if command -v rustup >/dev/null 2>&1; then cargo=(cargo "+$toolchain"); fi
if [ "$toolchain" != nightly ] && [[ $toolchain != nightly-* ]]; then export RUSTC_BOOTSTRAP=1; fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz 0.13.2 (once per machine)" >&2
  start=$(date +%s)
  cargo install cargo-fuzz --locked --version 0.13.2
  echo "fuzz: cargo-fuzz installed in $(( $(date +%s) - start ))s" >&2
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <("${cargo[@]}" fuzz list); fi

# Release build with debug assertions and overflow checks, AddressSanitizer (defaults).
build=(-a --sanitizer address)
echo "fuzz: $("${cargo[@]}" --version) (toolchain $toolchain${RUSTC_BOOTSTRAP:+, RUSTC_BOOTSTRAP=1}), ${seconds}s per target" >&2
start=$(date +%s)
"${cargo[@]}" fuzz build "${build[@]}"
echo "fuzz: built in $(( $(date +%s) - start ))s" >&2

mkdir -p target/logs
summary=()
for t in "${targets[@]}"; do
  mkdir -p "target/corpus/$t" "corpus/$t"
  log=target/logs/$t.log
  echo "fuzz: $t for ${seconds}s" >&2
  if ! "${cargo[@]}" fuzz run "${build[@]}" "$t" "target/corpus/$t" "corpus/$t" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz: $t FAILED (log: fuzz/$log; input: fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
  summary+=("$(printf '%-16s %10s runs  %s' "$t" "${runs:-?}" "$cov")")
done
printf 'fuzz: %s\n' "${summary[@]}" >&2
echo "fuzz: every target ran ${seconds}s without a crash ($(( $(date +%s) - start ))s in all)" >&2
