//! The rules a parsed [`Config`] must still meet: bounds (sizes, durations, counts) and
//! rules across keys (`ttl` at least `lock_ttl`, the lease against
//! `redis.command_timeout`, unique route names). Values that have a type (methods,
//! header names, statuses, the upstream URL, addresses) are parsed while the
//! configuration is read ([`super::typed`]), not checked here. Every rule names the
//! key it checks. [`crate::App::build`] runs it too, so it cannot be skipped.

use std::collections::HashSet;
use std::time::Duration;

use super::{Config, ConfigError, IdempotencyConfig, ServerConfig};

/// Checks every value that parsed but may still be unusable.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    let s = &config.server;
    positive_size("server.max_request_body", s.max_request_body.as_u64())?;
    positive_size("server.max_response_body", s.max_response_body.as_u64())?;
    if s.max_header_size.as_u64() < 8192 {
        return Err(ConfigError::invalid(
            "server.max_header_size",
            "must be at least 8KiB",
        ));
    }
    positive_duration("server.header_read_timeout", s.header_read_timeout)?;
    positive_duration("server.body_read_timeout", s.body_read_timeout)?;
    server_limits(s)?;

    if config.admin.token.is_some() && config.admin.token_file.is_some() {
        return Err(ConfigError::invalid(
            "admin.token_file",
            "set `admin.token` or `admin.token_file`, not both",
        ));
    }
    if let Some(token) = &config.admin.token {
        if token.len() < 16 {
            return Err(ConfigError::invalid(
                "admin.token",
                "must be at least 16 characters (or absent to turn the admin API off)",
            ));
        }
    }

    positive_duration("replay_cache.max_age", config.replay_cache.max_age)?;

    if !(1..=1 << 24).contains(&config.log.queue_lines) {
        return Err(ConfigError::invalid(
            "log.queue_lines",
            "must be between 1 and 16777216",
        ));
    }

    let r = &config.redis;
    let tls = r.url.starts_with("rediss://");
    if !tls && !r.url.starts_with("redis://") {
        return Err(ConfigError::invalid(
            "redis.url",
            "must start with redis:// (or rediss:// for TLS)",
        ));
    }
    if !tls && r.tls.is_set() {
        // Settings for a TLS connection that is never made would suggest a protection
        // that is not there.
        return Err(ConfigError::invalid(
            "redis.tls",
            "is set but redis.url is not rediss://: the connection would be plaintext",
        ));
    }
    if r.tls.cert_file.is_some() != r.tls.key_file.is_some() {
        return Err(ConfigError::invalid(
            "redis.tls.cert_file",
            "cert_file and key_file go together: set both or neither",
        ));
    }
    if r.password_file.is_some() && url_password(&r.url) {
        return Err(ConfigError::invalid(
            "redis.password_file",
            "redis.url carries a password too: set it in one place",
        ));
    }
    if r.key_prefix.is_empty() || r.key_prefix.contains(['{', '}']) {
        return Err(ConfigError::invalid(
            "redis.key_prefix",
            "must be non-empty and must not contain `{` or `}` (they are Redis Cluster hash tags)",
        ));
    }
    super::topology::check(r)?;
    super::replication::check(r)?;
    positive_duration("redis.command_timeout", r.command_timeout)?;
    positive_duration("redis.connect_timeout", r.connect_timeout)?;
    positive_duration("redis.probe_interval", r.probe_interval)?;
    if !(1..=64).contains(&r.pool_size) {
        return Err(ConfigError::invalid(
            "redis.pool_size",
            "must be between 1 and 64",
        ));
    }

    if let Some(pg) = &config.postgres {
        if !(pg.url.starts_with("postgres://") || pg.url.starts_with("postgresql://")) {
            return Err(ConfigError::invalid(
                "postgres.url",
                "must start with postgres://",
            ));
        }
        let resolved = pg.tls.resolve(&pg.url)?;
        if pg.password_file.is_some() && url_password(&resolved.url) {
            return Err(ConfigError::invalid(
                "postgres.password_file",
                "postgres.url carries a password too: set it in one place",
            ));
        }
        if resolved.url.parse::<tokio_postgres::Config>().is_err() {
            return Err(ConfigError::invalid(
                "postgres.url",
                "is not a valid connection URL",
            ));
        }
        if !(1..=256).contains(&pg.pool_size) {
            return Err(ConfigError::invalid(
                "postgres.pool_size",
                "must be between 1 and 256",
            ));
        }
        positive_duration("postgres.statement_timeout", pg.statement_timeout)?;
        positive_duration("postgres.reap_interval", pg.reap_interval)?;
        if !(1..=10_000).contains(&pg.batch_max) {
            return Err(ConfigError::invalid(
                "postgres.batch_max",
                "must be between 1 and 10000",
            ));
        }
        if pg.retry_queue == 0 {
            return Err(ConfigError::invalid(
                "postgres.retry_queue",
                "must be greater than zero",
            ));
        }
        if pg.reap_batch == 0 {
            return Err(ConfigError::invalid(
                "postgres.reap_batch",
                "must be greater than zero",
            ));
        }
        positive_duration("postgres.completer_interval", pg.completer_interval)?;
        if pg.completer_attempts == 0 || pg.completer_batch == 0 {
            let key = match pg.completer_attempts {
                0 => "postgres.completer_attempts",
                _ => "postgres.completer_batch",
            };
            return Err(ConfigError::invalid(key, "must be greater than zero"));
        }
    }
    completer(config, "idempotency", &config.idempotency)?;

    idempotency("idempotency", &config.idempotency)?;

    let mut names = HashSet::new();
    for (i, route) in config.routes.iter().enumerate() {
        let at = format!("routes[{i}]");
        let name_ok = !route.name.is_empty()
            && route.name.len() <= 64
            && (route.name.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(ConfigError::invalid(
                format!("{at}.name"),
                "must be 1 to 64 characters of A-Z, a-z, 0-9, `_` or `-`",
            ));
        }
        if !names.insert(route.name.as_str()) {
            return Err(ConfigError::invalid(
                format!("{at}.name"),
                format!("duplicate route name `{}`", route.name),
            ));
        }
        if !route.path_prefix.starts_with('/') {
            return Err(ConfigError::invalid(
                format!("{at}.path_prefix"),
                "must start with `/`",
            ));
        }
        positive_duration(&format!("{at}.upstream_timeout"), route.upstream_timeout)?;
        if route.upstream.scheme_str() != Some("https") && route.tls.is_set() {
            return Err(ConfigError::invalid(
                format!("{at}.tls"),
                "is set but the upstream is not https://: the connection would be plaintext",
            ));
        }
        let effective = route.idempotency.apply(&config.idempotency);
        idempotency(&format!("{at}.idempotency"), &effective)?;
        completer(config, &format!("{at}.idempotency"), &effective)?;
        // The holder's heartbeat extends the lease every third of it, so the upstream
        // call may outlive `lock_ttl`; each extension must have time to land.
        // Saturating: a huge command_timeout is refused here, not an overflow panic.
        let floor = config.redis.command_timeout.saturating_mul(3);
        if effective.lock_ttl < floor {
            return Err(ConfigError::invalid(
                format!("{at}.idempotency.lock_ttl"),
                format!(
                    "the lease ({}) must be at least 3 x redis.command_timeout ({}), so that \
                     its heartbeat (every third of the lease) can land before it expires",
                    humantime::format_duration(effective.lock_ttl),
                    humantime::format_duration(floor),
                ),
            ));
        }
    }
    Ok(())
}

/// `completer = true` needs a durable lease to keep the request with: `[postgres]` with
/// `claims = "write_through"`.
fn completer(config: &Config, at: &str, c: &IdempotencyConfig) -> Result<(), ConfigError> {
    let durable = (config.postgres.as_ref())
        .is_some_and(|pg| pg.claims == super::ClaimDurability::WriteThrough);
    if c.completer && !durable {
        return Err(ConfigError::invalid(
            format!("{at}.completer"),
            "needs [postgres] with claims = \"write_through\": the completer sends a \
             request again only from a durable lease",
        ));
    }
    Ok(())
}

fn idempotency(at: &str, c: &IdempotencyConfig) -> Result<(), ConfigError> {
    // Header names, methods and statuses were parsed with the configuration.
    if c.scope_headers.is_empty() {
        return Err(ConfigError::invalid(
            format!("{at}.scope_headers"),
            "name at least one tenant header",
        ));
    }
    if c.max_key_length == 0 || c.max_key_length > 4096 {
        return Err(ConfigError::invalid(
            format!("{at}.max_key_length"),
            "must be between 1 and 4096",
        ));
    }
    positive_duration(&format!("{at}.ttl"), c.ttl)?;
    positive_duration(&format!("{at}.lock_ttl"), c.lock_ttl)?;
    if c.ttl < c.lock_ttl {
        return Err(ConfigError::invalid(
            format!("{at}.ttl"),
            "must be at least `lock_ttl`: a response must be kept at least as long as its lease",
        ));
    }
    positive_duration(&format!("{at}.wait_timeout"), c.wait_timeout)?;
    if c.max_waiters == 0 {
        return Err(ConfigError::invalid(
            format!("{at}.max_waiters"),
            "must be greater than zero",
        ));
    }
    if !c.mismatch_status.is_client_error() {
        return Err(ConfigError::invalid(
            format!("{at}.mismatch_status"),
            "must be a 4xx status",
        ));
    }
    Ok(())
}

/// `server.max_connections`, `max_in_flight`, `write_timeout` and `buffer_budget`.
fn server_limits(s: &ServerConfig) -> Result<(), ConfigError> {
    if !(1..=1_000_000).contains(&s.max_connections) {
        return Err(ConfigError::invalid(
            "server.max_connections",
            "must be between 1 and 1000000",
        ));
    }
    if !(1..=1_000_000).contains(&s.max_in_flight) {
        return Err(ConfigError::invalid(
            "server.max_in_flight",
            "must be between 1 and 1000000",
        ));
    }
    positive_duration("server.write_timeout", s.write_timeout)?;
    let one = (s.max_request_body.as_u64()).saturating_add(s.max_response_body.as_u64());
    if s.buffer_budget.as_u64() < one {
        return Err(ConfigError::invalid(
            "server.buffer_budget",
            format!(
                "must hold at least one request and its response: \
                 server.max_request_body + server.max_response_body ({one} bytes)"
            ),
        ));
    }
    Ok(())
}

fn positive_duration(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(ConfigError::invalid(key, "must be greater than zero"));
    }
    Ok(())
}

fn positive_size(key: &str, bytes: u64) -> Result<(), ConfigError> {
    if bytes == 0 {
        return Err(ConfigError::invalid(key, "must be greater than zero"));
    }
    Ok(())
}

/// Whether `scheme://user:password@host...` carries a password (in the user info or
/// as a `password` parameter).
fn url_password(url: &str) -> bool {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let in_userinfo = (base.split_once("://"))
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    in_userinfo || query.split('&').any(|p| p.starts_with("password="))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn route(extra: &str) -> String {
        format!(
            "[[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\n\
             upstream = \"http://127.0.0.1:3000\"\nupstream_timeout = \"20s\"\n{extra}"
        )
    }

    fn err(toml: &str) -> String {
        Config::from_toml(toml).unwrap_err().to_string()
    }

    #[test]
    fn huge_values_are_refused_not_overflowed() {
        // 3 x command_timeout and max_request_body + max_response_body overflowed (a
        // panic in `Duration * u32`; a wrapped sum in release builds).
        let e = err(&format!(
            "[redis]\ncommand_timeout = \"6148914691236517206s\"\n{}",
            route("")
        ));
        assert!(e.contains("routes[0].idempotency.lock_ttl"), "{e}");
        let e = err("[server]\nmax_request_body = \"15EiB\"\nmax_response_body = \"15EiB\"\n");
        assert!(e.contains("server.buffer_budget"), "{e}");
    }

    #[test]
    fn the_issue_example_is_valid() {
        Config::from_toml(&route("")).unwrap();
    }

    #[test]
    fn lease_must_leave_room_for_its_heartbeat() {
        // The heartbeat lets the upstream call outlive the lease.
        Config::from_toml(&route("[routes.idempotency]\nlock_ttl = \"10s\"\n")).unwrap();
        let e = err(&route("[routes.idempotency]\nlock_ttl = \"2s\"\n"));
        assert!(e.contains("routes[0].idempotency.lock_ttl"), "{e}");
        assert!(e.contains("redis.command_timeout"), "{e}");
        let e = err(&format!(
            "[redis]\ncommand_timeout = \"5s\"\n[idempotency]\nlock_ttl = \"10s\"\n{}",
            route("")
        ));
        assert!(e.contains("routes[0].idempotency.lock_ttl"), "{e}");
    }

    #[test]
    fn each_rule_names_its_key() {
        let cases = [
            ("[server]\nlisten = \"nowhere\"\n", "server.listen"),
            ("[redis]\nurl = \"http://x\"\n", "redis.url"),
            ("[redis]\nkey_prefix = \"a{b\"\n", "redis.key_prefix"),
            (
                "[idempotency]\nmethods = [\"post\"]\n",
                "idempotency.methods[0]",
            ),
            (
                "[idempotency]\nmismatch_status = 500\n",
                "idempotency.mismatch_status",
            ),
            (
                "[idempotency]\nmax_key_length = 0\n",
                "idempotency.max_key_length",
            ),
            (
                "[idempotency]\nheader = \"bad header\"\n",
                "idempotency.header",
            ),
            (
                "[idempotency]\nrelease_statuses = [999]\n",
                "idempotency.release_statuses[0]",
            ),
            (
                "[server]\nmax_header_size = \"1KiB\"\n",
                "server.max_header_size",
            ),
            (
                "[idempotency]\nscope_headers = []\n",
                "idempotency.scope_headers",
            ),
            (
                "[idempotency]\nscope_headers = [\"X-Tenant-Id\", \"bad header\"]\n",
                "idempotency.scope_headers[1]",
            ),
        ];
        for (toml, key) in cases {
            let e = err(toml);
            assert!(e.contains(key), "{toml:?} gave {e}");
        }
    }

    #[test]
    fn tls_settings_are_accepted_where_they_mean_something() {
        Config::from_toml(
            "[redis]\nurl = \"rediss://h:6380\"\n[redis.tls]\nca_file = \"/ca.pem\"\n",
        )
        .unwrap();
        let e = err("[redis]\nurl = \"redis://h:6379\"\n[redis.tls]\nca_file = \"/ca.pem\"\n");
        assert!(e.contains("redis.tls") && e.contains("plaintext"), "{e}");
        let e = err("[redis]\nurl = \"rediss://h\"\n[redis.tls]\ncert_file = \"/c.pem\"\n");
        assert!(e.contains("redis.tls.cert_file"), "{e}");
        let e = err("[redis]\nurl = \"redis://u:pw@h\"\npassword_file = \"/pw\"\n");
        assert!(e.contains("redis.password_file"), "{e}");
        for fine in [
            "",
            "?sslmode=disable",
            "?sslmode=verify-full&sslrootcert=/ca.pem",
            "?connect_timeout=2",
        ] {
            let toml = format!("[postgres]\nurl = \"postgres://u@h/db{fine}\"\n");
            Config::from_toml(&toml).unwrap_or_else(|e| panic!("{fine}: {e}"));
        }
        let e = err("[postgres]\nurl = \"postgres://u:pw@h/db\"\npassword_file = \"/pw\"\n");
        assert!(e.contains("postgres.password_file"), "{e}");
        let e = err(&route("[routes.tls]\nca_file = \"/ca.pem\"\n"));
        assert!(e.contains("routes[0].tls"), "{e}");
        let e = err("[admin]\ntoken = \"0123456789abcdef\"\ntoken_file = \"/t\"\n");
        assert!(e.contains("admin.token_file"), "{e}");
    }

    #[test]
    fn route_rules_name_their_key() {
        let e = err(&route("").replace("http://127.0.0.1:3000", "ftp://x"));
        assert!(e.contains("routes[0].upstream"), "{e}");
        let e = err(&route("").replace("/v1/", "v1"));
        assert!(e.contains("routes[0].path_prefix"), "{e}");
        let e = err(&format!("{}{}", route(""), route("")));
        assert!(e.contains("routes[1].name"), "{e}");
    }

    #[test]
    fn server_limits_name_their_key() {
        let ok = Config::from_toml(
            "[server]\nmax_connections = 10\nmax_in_flight = 5\nwrite_timeout = \"250ms\"\n\
             buffer_budget = \"9MiB\"\n",
        )
        .unwrap();
        assert_eq!(ok.server.max_connections, 10);
        assert_eq!(
            ok.server.write_timeout,
            std::time::Duration::from_millis(250)
        );
        let cases = [
            ("[server]\nmax_connections = 0\n", "server.max_connections"),
            ("[server]\nmax_in_flight = 0\n", "server.max_in_flight"),
            ("[server]\nwrite_timeout = \"0s\"\n", "server.write_timeout"),
            (
                "[server]\nwrite_timeout = \"soon\"\n",
                "server.write_timeout",
            ),
            (
                "[server]\nbuffer_budget = \"8MiB\"\n",
                "server.buffer_budget",
            ),
            (
                "[server]\nbuffer_budget = \"lots\"\n",
                "server.buffer_budget",
            ),
        ];
        for (toml, key) in cases {
            let e = err(toml);
            assert!(e.contains(key), "{toml:?} gave {e}");
        }
    }
}
