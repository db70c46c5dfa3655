//! `redis.replica_acks` and `redis.replica_ack_timeout`: how many replicas must
//! acknowledge a completion (Redis `WAIT`) before the client is answered. `0` (the
//! default) sends no `WAIT`: today's one round trip per completion. With `n > 0`, the
//! completion script and `WAIT n timeout` are pipelined on one dedicated connection (one
//! round trip, plus the time the replicas take to acknowledge). A `WAIT` that returns
//! fewer than `n` replicas is counted and logged, and the client is still answered: the
//! upstream has acted and the response is stored on the primary (and, with `[postgres]`,
//! already in Postgres); withholding it would not make it safer. See docs/guarantees.md,
//! "Failover: what each mode guarantees".

use std::time::Duration;

use super::error::ConfigError;

/// Default `redis.replica_ack_timeout`.
pub const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(100);

/// The rules of `redis.replica_acks` and `redis.replica_ack_timeout`.
pub fn check(
    replica_acks: u32,
    replica_ack_timeout: Duration,
    command_timeout: Duration,
) -> Result<(), ConfigError> {
    if replica_acks > 16 {
        return Err(ConfigError::invalid(
            "redis.replica_acks",
            "must be between 0 (no WAIT) and 16",
        ));
    }
    if replica_acks > 0 {
        // WAIT 0 ms would block forever; a WAIT past the command timeout would turn
        // every completion on a shard without its replica into a timeout.
        if replica_ack_timeout.is_zero() || replica_ack_timeout >= command_timeout {
            return Err(ConfigError::invalid(
                "redis.replica_ack_timeout",
                format!(
                    "must be above 0 and below redis.command_timeout ({}) when \
                     redis.replica_acks is set: WAIT blocks its connection until then",
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
        assert_eq!(c.redis.replica_acks, 0);
        assert_eq!(
            c.redis.replica_ack_timeout,
            super::DEFAULT_REPLICA_ACK_TIMEOUT
        );
    }

    #[test]
    fn replica_ack_timeout_must_stay_below_the_command_timeout() {
        let err = load(&format!(
            "[redis]\nreplica_acks = 1\nreplica_ack_timeout = \"2s\"\n\
             command_timeout = \"1s\"\n{ROUTE}"
        ))
        .unwrap_err();
        assert!(err.contains("redis.replica_ack_timeout"), "{err}");
        let err = load(&format!(
            "[redis]\nreplica_acks = 1\nreplica_ack_timeout = \"0s\"\n{ROUTE}"
        ))
        .unwrap_err();
        assert!(err.contains("redis.replica_ack_timeout"), "{err}");
        let c = load(&format!(
            "[redis]\nreplica_acks = 1\nreplica_ack_timeout = \"50ms\"\n{ROUTE}"
        ))
        .unwrap();
        assert_eq!(c.redis.replica_acks, 1);
    }

    #[test]
    fn vouched_claims_need_a_replica_ack_timeout_below_the_command_timeout() {
        let pg = "[postgres]\nurl = \"postgres://u@h/d\"\nclaims = \"vouched\"\n";
        let err = load(&format!(
            "[redis]\nreplica_ack_timeout = \"0s\"\n{pg}{ROUTE}"
        ))
        .unwrap_err();
        assert!(err.contains("redis.replica_ack_timeout"), "{err}");
        assert!(load(&format!("{pg}{ROUTE}")).is_ok());
    }
}
