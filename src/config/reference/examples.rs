//! Wrong values, one per rule `check-config` enforces: the reference runs each through
//! [`crate::Config::from_toml`] and prints the message it gives, so the messages shown
//! are the ones the binary prints. A test checks that every key a rule in `src/config/`
//! names literally has an example here.

/// A route to give the examples that need one.
const R: &str = "[[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"http://127.0.0.1:3000\"\n";

/// `(setting, configuration that is wrong about it)`; `{R}` is a valid route.
pub const EXAMPLES: &[(&str, &str)] = &[
    ("server.listen", "[server]\nlisten = \"nowhere\""),
    ("server.max_request_body", "[server]\nmax_request_body = \"0B\""),
    ("server.max_response_body", "[server]\nmax_response_body = \"0B\""),
    ("server.max_header_size", "[server]\nmax_header_size = \"1KiB\""),
    ("server.header_read_timeout", "[server]\nheader_read_timeout = \"0s\""),
    ("server.body_read_timeout", "[server]\nbody_read_timeout = \"soon\""),
    ("server.max_connections", "[server]\nmax_connections = 0"),
    ("server.max_in_flight", "[server]\nmax_in_flight = 0"),
    ("server.write_timeout", "[server]\nwrite_timeout = \"0s\""),
    ("server.buffer_budget", "[server]\nbuffer_budget = \"8MiB\""),
    ("server.trusted_proxies", "[server]\ntrusted_proxies = [\"10.0.0.0/33\"]"),
    ("server.runtime", "[server]\nruntime = \"fibers\""),
    ("server.workers", "[server]\nworkers = 0"),
    ("log.format", "[log]\nformat = \"xml\""),
    ("log.queue_lines", "[log]\nqueue_lines = 0"),
    ("admin.token", "[admin]\ntoken = \"short\""),
    ("admin.token_file", "[admin]\ntoken = \"0123456789abcdef\"\ntoken_file = \"/run/secrets/token\""),
    ("replay_cache.max_age", "[replay_cache]\nmax_age = \"0s\""),
    ("redis.mode", "[redis]\nmode = \"ring\""),
    ("redis.url", "[redis]\nurl = \"http://127.0.0.1:6379\""),
    ("redis.nodes", "[redis]\nmode = \"cluster\""),
    ("redis.nodes", "[redis]\nnodes = [\"redis://10.0.0.1:6379\"]"),
    ("redis.sentinel", "[redis.sentinel]\nservice_name = \"main\""),
    ("redis.sentinel.nodes", "[redis]\nmode = \"sentinel\""),
    ("redis.sentinel.service_name", "[redis]\nmode = \"sentinel\"\n[redis.sentinel]\nnodes = [\"redis://10.0.0.1:26379\"]"),
    ("redis.key_prefix", "[redis]\nkey_prefix = \"a{b}\""),
    ("redis.command_timeout", "[redis]\ncommand_timeout = \"0s\""),
    ("redis.connect_timeout", "[redis]\nconnect_timeout = \"0s\""),
    ("redis.pool_size", "[redis]\npool_size = 0"),
    ("redis.probe_interval", "[redis]\nprobe_interval = \"0s\""),
    ("redis.wait_replicas", "[redis]\nwait_replicas = 17"),
    ("redis.wait_timeout", "[redis]\nwait_replicas = 1\nwait_timeout = \"2s\""),
    ("redis.password_file", "[redis]\nurl = \"redis://:pw@127.0.0.1:6379\"\npassword_file = \"/run/secrets/redis\""),
    ("redis.tls", "[redis.tls]\nca_file = \"/etc/idemgate/ca.pem\""),
    ("redis.tls.cert_file", "[redis]\nurl = \"rediss://127.0.0.1:6380\"\n[redis.tls]\ncert_file = \"/etc/idemgate/client.pem\""),
    ("postgres.url", "[postgres]\nurl = \"mysql://127.0.0.1/db\""),
    ("postgres.url", "[postgres]\nurl = \"postgres://u@h/db?sslmode=allow\""),
    ("postgres.pool_size", "[postgres]\npool_size = 0"),
    ("postgres.lookup_on_miss", "[postgres]\nlookup_on_miss = \"never\""),
    ("postgres.claims", "[postgres]\nclaims = \"memory\""),
    ("postgres.statement_timeout", "[postgres]\nstatement_timeout = \"0s\""),
    ("postgres.batch_max", "[postgres]\nbatch_max = 0"),
    ("postgres.retry_queue", "[postgres]\nretry_queue = 0"),
    ("postgres.reap_interval", "[postgres]\nreap_interval = \"0s\""),
    ("postgres.reap_batch", "[postgres]\nreap_batch = 0"),
    ("postgres.password_file", "[postgres]\nurl = \"postgres://u:pw@h/db\"\npassword_file = \"/run/secrets/pg\""),
    ("postgres.tls.sslmode", "[postgres]\nurl = \"postgres://u@h/db?sslmode=disable\"\n[postgres.tls]\nsslmode = \"require\""),
    ("postgres.tls.sslcert", "[postgres]\nurl = \"postgres://u@h/db\"\n[postgres.tls]\nsslcert = \"/etc/idemgate/pg.pem\""),
    ("idempotency.header", "[idempotency]\nheader = \"bad header\""),
    ("idempotency.methods", "[idempotency]\nmethods = [\"post\"]"),
    ("idempotency.max_key_length", "[idempotency]\nmax_key_length = 0"),
    ("idempotency.ttl", "[idempotency]\nttl = \"10s\""),
    ("idempotency.lock_ttl", "[idempotency]\nlock_ttl = \"2s\"\n{R}"),
    ("idempotency.scope_headers", "[idempotency]\nscope_headers = []"),
    ("idempotency.anonymous", "[idempotency]\nanonymous = \"allow\""),
    ("idempotency.mismatch_status", "[idempotency]\nmismatch_status = 500"),
    ("idempotency.release_statuses", "[idempotency]\nrelease_statuses = [999]"),
    ("idempotency.wait_timeout", "[idempotency]\nwait_timeout = \"0s\""),
    ("idempotency.max_waiters", "[idempotency]\nmax_waiters = 0"),
    ("routes[].name", "[[routes]]\nname = \"pay ments\"\npath_prefix = \"/v1/\"\nupstream = \"http://127.0.0.1:3000\""),
    ("routes[].name", "{R}{R}"),
    ("routes[].path_prefix", "[[routes]]\nname = \"payments\"\npath_prefix = \"v1\"\nupstream = \"http://127.0.0.1:3000\""),
    ("routes[].upstream", "[[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"ftp://127.0.0.1\""),
    ("routes[].upstream_timeout", "{R}upstream_timeout = \"0s\""),
    ("routes[].tls", "{R}[routes.tls]\nca_file = \"/etc/idemgate/ca.pem\""),
    ("encryption.keys[]", "[encryption]\nkeys = []\nactive = \"k1\""),
    ("encryption.keys[].key_file", "[encryption]\nkeys = [{ id = \"k1\", key_file = \"/nonexistent/k1\" }]\nactive = \"k1\""),
];

/// The configuration of an example, its route filled in.
pub fn toml(example: &str) -> String {
    example.replace("{R}", R).trim_end().to_string() + "\n"
}
