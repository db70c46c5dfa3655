//! `redis.wait_replicas` and `redis.wait_timeout`: how many replicas must acknowledge a
//! completion (Redis `WAIT`) before the client is answered. `0` (the default) sends no
//! `WAIT`: today's one round trip per completion. With `n > 0`, the completion script and
//! `WAIT n timeout` are pipelined on one dedicated connection (one round trip, plus the
//! time the replicas take to acknowledge). A `WAIT` that returns fewer than `n` replicas
//! is counted and logged, and the client is still answered: the upstream has acted and
//! the response is stored on the primary (and, with `[postgres]`, already in Postgres);
//! withholding it would not make it safer. See docs/guarantees.md, "Failover: what each mode
//! guarantees".

use std::time::Duration;

use super::error::ConfigError;

/// Default `redis.wait_timeout`.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(100);

/// The rules of `redis.wait_replicas` and `redis.wait_timeout`.
pub fn check(
    wait_replicas: u32,
    wait_timeout: Duration,
    command_timeout: Duration,
) -> Result<(), ConfigError> {
    if wait_replicas > 16 {
        return Err(ConfigError::invalid(
            "redis.wait_replicas",
            "must be between 0 (no WAIT) and 16",
        ));
    }
    if wait_replicas > 0 {
        // WAIT 0 ms would block forever; a WAIT past the command timeout would turn
        // every completion on a shard without its replica into a timeout.
        if wait_timeout.is_zero() || wait_timeout >= command_timeout {
            return Err(ConfigError::invalid(
                "redis.wait_timeout",
                format!(
                    "must be above 0 and below redis.command_timeout ({}) when \
                     redis.wait_replicas is set: WAIT blocks its connection until then",
                    humantime::format_duration(command_timeout)
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(toml: &str) -> Result<Config, String> {
        let c = Config::from_toml(toml).map_err(|e| e.to_string())?;
        crate::config::validate(&c).map_err(|e| e.to_string())?;
        Ok(c)
    }

    const ROUTE: &str =
        "[[routes]]\nname = \"r\"\npath_prefix = \"/v1/\"\nupstream = \"http://127.0.0.1:3000\"\n";

    #[test]
    fn default_sends_no_wait() {
        let c = load(ROUTE).unwrap();
        assert_eq!(c.redis.wait_replicas, 0);
        assert_eq!(c.redis.wait_timeout, super::DEFAULT_WAIT_TIMEOUT);
    }

    #[test]
    fn wait_timeout_must_stay_below_the_command_timeout() {
        let err = load(&format!(
            "[redis]\nwait_replicas = 1\nwait_timeout = \"2s\"\ncommand_timeout = \"1s\"\n{ROUTE}"
        ))
        .unwrap_err();
        assert!(err.contains("redis.wait_timeout"), "{err}");
        let err = load(&format!(
            "[redis]\nwait_replicas = 1\nwait_timeout = \"0s\"\n{ROUTE}"
        ))
        .unwrap_err();
        assert!(err.contains("redis.wait_timeout"), "{err}");
        let c = load(&format!(
            "[redis]\nwait_replicas = 1\nwait_timeout = \"50ms\"\n{ROUTE}"
        ))
        .unwrap();
        assert_eq!(c.redis.wait_replicas, 1);
    }

    #[test]
    fn vouched_claims_need_a_wait_timeout_below_the_command_timeout() {
        let pg = "[postgres]\nurl = \"postgres://u@h/d\"\nclaims = \"vouched\"\n";
        let err = load(&format!("[redis]\nwait_timeout = \"0s\"\n{pg}{ROUTE}")).unwrap_err();
        assert!(err.contains("redis.wait_timeout"), "{err}");
        assert!(load(&format!("{pg}{ROUTE}")).is_ok());
    }
}
