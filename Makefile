# idemgate: developer entry points. `make up` and `make test` install what is missing.
.PHONY: up down test lint deps

# Start the local stack on loopback (Redis, demo upstream, gateway); see deploy/local/up.sh.
up:
	bash deploy/local/up.sh

# Stop everything `make up` started.
down:
	bash deploy/local/down.sh

# Install missing Debian packages, then run every test (unit, integration, alert rules).
test: deps
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	cargo test --all-targets

# Formatting and lints, as CI runs them.
lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

deps:
	bash deploy/install-deps.sh
