//! The rules a parsed [`Config`] must still meet: bounds (sizes, durations, counts) and
//! rules across keys (`ttl` at least `lock_ttl`, the lease against
//! `redis.command_timeout`, unique route names). Values that have a type (methods,
//! header names, statuses, the upstream URL, addresses) are parsed while the
//! configuration is read ([`super::typed`]), not checked here. Every rule names the
//! key it checks. Each section's own rules live with the section (`ServerConfig::check`
//! and the like); [`validate`] runs them in order, then the rules across sections.
//! [`crate::App::build`] runs it too, so it cannot be skipped.

use std::collections::HashSet;
use std::time::Duration;

use super::error::ConfigError;
use super::idempotency::IdempotencyConfig;
use super::Config;

/// Checks every value that parsed but may still be unusable.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    config.server.check()?;
    config.admin.check()?;
    config.replay_cache.check()?;
    config.log.check()?;
    config.tracing.check()?;
    config.redis.check()?;
    if let Some(pg) = &config.postgres {
        pg.check()?;
    }
    if config.vouched_claims() {
        config.redis.check_vouched()?;
    }
    let postgres = config.postgres.as_ref();
    config
        .idempotency
        .check_completer("idempotency", postgres)?;
    config.idempotency.check("idempotency")?;
    routes(config)
}

/// Each route's own rules, then those of its effective idempotency settings.
fn routes(config: &Config) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, route) in config.routes.iter().enumerate() {
        let at = format!("routes[{i}]");
        route.check(&at, &mut names)?;
        let effective = route.idempotency.apply(&config.idempotency);
        effective.check(&format!("{at}.idempotency"))?;
        effective.check_completer(&format!("{at}.idempotency"), config.postgres.as_ref())?;
        lease_floor(&at, &effective, config.redis.command_timeout)?;
    }
    Ok(())
}

/// The holder's heartbeat extends the lease every third of it, so the upstream call may
/// outlive `lock_ttl`; each extension must have time to land.
fn lease_floor(
    at: &str,
    effective: &IdempotencyConfig,
    command_timeout: Duration,
) -> Result<(), ConfigError> {
    // Saturating: a huge command_timeout is refused here, not an overflow panic.
    let floor = command_timeout.saturating_mul(3);
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
    Ok(())
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
        Config::from_toml("[server.tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n").unwrap();
        let e = err("[server.tls]\ncert = \"/c.pem\"\n");
        assert!(e.contains("server.tls.key"), "{e}");
        let e = err("[server.tls]\nkey = \"/k.pem\"\n");
        assert!(e.contains("server.tls.cert"), "{e}");
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
            "[server]\nmax_connections = 10\nmax_concurrent_requests = 5\n\
             write_timeout = \"250ms\"\nbuffer_budget = \"9MiB\"\n",
        )
        .unwrap();
        assert_eq!(ok.server.max_connections, 10);
        assert_eq!(
            ok.server.write_timeout,
            std::time::Duration::from_millis(250)
        );
        let cases = [
            ("[server]\nmax_connections = 0\n", "server.max_connections"),
            (
                "[server]\nmax_concurrent_requests = 0\n",
                "server.max_concurrent_requests",
            ),
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

    #[test]
    fn http2_settings_have_safe_defaults_and_name_their_key() {
        let d = Config::from_toml("").unwrap().server;
        assert_eq!(d.http2_max_concurrent_streams, 100);
        assert_eq!(d.http2_initial_stream_window.as_u64(), 256 << 10);
        assert_eq!(d.http2_initial_connection_window.as_u64(), 1 << 20);
        assert_eq!(d.http2_max_pending_accept_reset_streams, 20);
        assert_eq!(d.http2_max_local_error_reset_streams, 1024);
        assert_eq!(d.http2_keep_alive_interval.as_secs(), 20);
        assert_eq!(d.http2_keep_alive_timeout.as_secs(), 20);
        let ok = Config::from_toml(
            "[server]\nhttp2_max_concurrent_streams = 1\nhttp2_initial_stream_window = \"64KiB\"\n\
             http2_initial_connection_window = \"64KiB\"\nhttp2_keep_alive_interval = \"0s\"\n\
             http2_keep_alive_timeout = \"0s\"\n",
        );
        assert!(ok.is_ok(), "the smallest values, pings off: {ok:?}");
        let cases = [
            (
                "http2_max_concurrent_streams = 0",
                "server.http2_max_concurrent_streams",
            ),
            (
                "http2_initial_stream_window = \"65535B\"",
                "server.http2_initial_stream_window",
            ),
            (
                "http2_initial_stream_window = \"2GiB\"",
                "server.http2_initial_stream_window",
            ),
            (
                "http2_initial_connection_window = \"128KiB\"\nhttp2_initial_stream_window = \"256KiB\"",
                "server.http2_initial_connection_window",
            ),
            (
                "http2_initial_connection_window = \"2GiB\"",
                "server.http2_initial_connection_window",
            ),
            (
                "http2_max_pending_accept_reset_streams = 0",
                "server.http2_max_pending_accept_reset_streams",
            ),
            (
                "http2_max_local_error_reset_streams = 0",
                "server.http2_max_local_error_reset_streams",
            ),
            (
                "http2_keep_alive_timeout = \"0s\"",
                "server.http2_keep_alive_timeout",
            ),
        ];
        for (setting, key) in cases {
            let e = err(&format!("[server]\n{setting}\n"));
            assert!(e.contains(key), "{setting:?} gave {e}");
        }
    }
}
