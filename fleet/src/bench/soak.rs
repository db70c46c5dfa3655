//! `idemgate-fleet soak start|down|ps|ports`: the fleet of `make soak`
//! (`loadtest/soak/run.sh`, `loadtest/soak/soak.py`), built from the bench's parts on ports
//! of its own ([`ports`]), with its state in `.state/soak/`, so a soak can run beside
//! `make bench`, `make chaos` and `make up`. `start` starts everything at once:
//!
//! - `redis` and `redis-replica`: as the durable default relies on it and the bench runs
//!   it (`appendonly yes`, `appendfsync always`, `noeviction`, one replica, each with its
//!   AOF rewrites), every per-slot warmth marker two days in the past (older than the
//!   soak's `ttl`; see [`super::warm`]);
//! - `postgres`: a cluster with durable defaults (as the bench's) whose records table
//!   already holds `SOAK_RECORDS` (default 10 million) completed records that do not
//!   expire during the soak, copied from the bench's seeded template (seeded first if
//!   there is none; see [`super::seeded`]); `SOAK_RECORDS=0` starts it empty;
//! - `upstream` (`demo-upstream --latency 0ms`, whose ledger counts executions);
//! - two gateway replicas `gw-1`, `gw-2` with the durable defaults (`[postgres]`,
//!   claims vouched by default), `[idempotency] ttl` from `SOAK_TTL` (default `3m`) and the
//!   reaper every `SOAK_REAP_INTERVAL` (default `30s`), so records expire and are
//!   deleted during the soak, and `postgres.redis_fill` from `SOAK_REDIS_FILL` when set
//!   (unset: the default, `on_replay` with vouched claims);
//! - `haproxy` in front of them (`loadtest/bench/haproxy.cfg`).
//!
//! `down` stops every part (replicas first, stores last), as [`Bench::down`] does.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{warm, Bench, GatewayOptions, Res};
use crate::net::http_status;
use crate::redis::{answers_ping, command as redis_command, DURABLE_REDIS};

/// The soak's loopback ports: none shared with the bench's or `make up`'s.
pub mod ports {
    pub const UPSTREAM: u16 = 18100;
    pub const HAPROXY: u16 = 18102;
    pub const REDIS: u16 = 16490;
    pub const REDIS_REPLICA: u16 = 16494;
    pub const POSTGRES: u16 = 15590;
    pub const REPLICAS: u16 = 2;
    /// Replica i (1-based) listens on 18110 + i, its admin listener on 18120 + i.
    pub const PORTS: super::super::Ports = super::super::Ports {
        redis: REDIS,
        postgres: POSTGRES,
        upstream: UPSTREAM,
        gateway_base: 18110,
        admin_base: 18120,
    };
    pub fn gateway(i: u16) -> u16 {
        PORTS.gateway(i)
    }
    pub fn admin(i: u16) -> u16 {
        PORTS.admin(i)
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// The replicas: the bench's configuration on the soak's ports, with the durable
/// defaults (`[postgres]`, claims vouched by default), a short `ttl`, a frequent reaper and,
/// when given, `postgres.redis_fill`.
fn gateway_options(ttl: &str, reap_interval: &str, redis_fill: Option<&str>) -> GatewayOptions {
    let mut env: Vec<(String, String)> = vec![
        ("IDEMGATE__IDEMPOTENCY__TTL".into(), ttl.into()),
        (
            "IDEMGATE__POSTGRES__REAP_INTERVAL".into(),
            reap_interval.into(),
        ),
    ];
    if let Some(fill) = redis_fill {
        env.push(("IDEMGATE__POSTGRES__REDIS_FILL".into(), fill.into()));
    }
    GatewayOptions {
        replicas: ports::REPLICAS,
        ports: ports::PORTS,
        env,
        ..GatewayOptions::default()
    }
}

/// `SOAK_RECORDS`: the records in the table before the load starts (default 10 million).
fn records() -> Result<u64, String> {
    let text = env_or("SOAK_RECORDS", "10000000");
    text.trim()
        .parse()
        .map_err(|_| format!("SOAK_RECORDS must be a number of records (got '{text}')"))
}

impl Bench {
    /// The soak fleet of the checkout at `root` (state in `.state/soak/`).
    pub fn soak(root: &Path) -> Self {
        Self {
            state: root.join(".state/soak"),
            ..Self::new(root)
        }
    }

    /// The durable Redis and its replica, from emptied directories (with the AOF on, a
    /// directory kept from an earlier soak would load its keys).
    fn soak_redis(&self) -> Res {
        let mut cmd = redis_command(ports::REDIS, &self.fresh_dir("redis")?);
        cmd.args(DURABLE_REDIS).args(["--daemonize", "no"]);
        self.start("redis", &[ports::REDIS], &mut cmd, || {
            answers_ping(ports::REDIS)
        })?;
        warm::backdate_two_days(ports::REDIS)?;
        self.start_replica_on(ports::REDIS, ports::REDIS_REPLICA)
    }

    fn soak_upstream(&self) -> Res {
        let mut cmd = Command::new(&self.upstream);
        cmd.args(["--listen", &format!("127.0.0.1:{}", ports::UPSTREAM)])
            .args(["--latency", "0ms"])
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1");
        self.start("upstream", &[ports::UPSTREAM], &mut cmd, || {
            http_status(ports::UPSTREAM, "/_demo/health", Duration::from_secs(2)) == Some(200)
        })
    }

    fn soak_gateways(&self) -> Res {
        let fill = std::env::var("SOAK_REDIS_FILL").ok();
        self.start_gateways(&gateway_options(
            &env_or("SOAK_TTL", "3m"),
            &env_or("SOAK_REAP_INTERVAL", "30s"),
            fill.as_deref().filter(|f| !f.is_empty()),
        ))
    }

    fn soak_haproxy(&self) -> Res {
        self.start_haproxy_on(
            ports::HAPROXY,
            (1..=ports::REPLICAS).map(ports::gateway),
            false,
        )
    }

    /// Starts the whole soak fleet; on failure stops what was started.
    pub fn soak_start(&self) -> Res {
        std::fs::create_dir_all(&self.state).map_err(|e| e.to_string())?;
        let records = records()?;
        let result = self
            .soak_redis()
            .and_then(|()| self.start_postgres_on(ports::POSTGRES))
            .and_then(|()| match records {
                0 => Ok(()),
                n => self.seed_postgres_on(ports::PORTS, n),
            })
            .and_then(|()| self.soak_upstream())
            .and_then(|()| self.soak_gateways())
            .and_then(|()| self.soak_haproxy());
        result.inspect_err(|_| self.down())
    }
}

fn ports_json() -> String {
    format!(
        "{{\"upstream\": {}, \"haproxy\": {}, \"redis\": {}, \"redis_replica\": {}, \
         \"postgres\": {}, \"gateways\": [{}, {}], \"admins\": [{}, {}]}}",
        ports::UPSTREAM,
        ports::HAPROXY,
        ports::REDIS,
        ports::REDIS_REPLICA,
        ports::POSTGRES,
        ports::gateway(1),
        ports::gateway(2),
        ports::admin(1),
        ports::admin(2),
    )
}

/// `idemgate-fleet soak ARGS` (ARGS without `soak`), run from the repository root.
pub fn main(args: &[String]) -> std::process::ExitCode {
    let root = match std::env::current_dir() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let soak = Bench::soak(&root);
    let result = match args.first().map(String::as_str) {
        Some("ports") => {
            println!("{}", ports_json());
            return std::process::ExitCode::SUCCESS;
        }
        Some("start") => soak.soak_start(),
        Some("down") => {
            soak.down();
            Ok(())
        }
        Some("ps") => Ok(()),
        _ => Err("usage: idemgate-fleet soak start|down|ps|ports".into()),
    };
    match result {
        Ok(()) => {
            println!("{}", super::cli::running_json(&soak));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_the_durable_defaults_a_short_ttl_and_the_soak_ports() {
        let opts = gateway_options("3m", "30s", None);
        let text = opts.render(opts.postgres_for(2));
        assert!(text.contains("[postgres]\nurl = \"postgres://postgres@127.0.0.1:15590/postgres\""));
        assert!(text.contains("url = \"redis://127.0.0.1:16490\""));
        assert!(text.contains("upstream = \"http://127.0.0.1:18100\""));
        assert!(
            !text.contains("claims"),
            "claims stay the default (vouched)"
        );
        let env = opts.env_of(2);
        for (k, v) in [
            ("IDEMGATE__IDEMPOTENCY__TTL", "3m"),
            ("IDEMGATE__POSTGRES__REAP_INTERVAL", "30s"),
            ("IDEMGATE__SERVER__LISTEN", "127.0.0.1:18112"),
            ("IDEMGATE__SERVER__ADMIN_LISTEN", "127.0.0.1:18122"),
        ] {
            assert!(env.contains(&(k.into(), v.into())), "{k} in {env:?}");
        }
        assert!(!env
            .iter()
            .any(|(k, _)| k == "IDEMGATE__POSTGRES__REDIS_FILL"));
        let filled = gateway_options("3m", "30s", Some("at_completion")).env_of(1);
        let fill = (
            "IDEMGATE__POSTGRES__REDIS_FILL".into(),
            "at_completion".into(),
        );
        assert!(filled.contains(&fill), "{filled:?}");
        assert!(!filled
            .iter()
            .any(|(k, _)| k == "IDEMGATE__POSTGRES__CLAIMS"));
    }

    #[test]
    fn soak_ports_do_not_collide_with_the_bench_or_make_up() {
        let bench = [
            super::super::ports::UPSTREAM,
            super::super::ports::HAPROXY,
            super::super::ports::REDIS,
            super::super::ports::REDIS_REPLICA,
            super::super::ports::POSTGRES,
            crate::local::REDIS_PORT,
            crate::local::PG_PORT,
            crate::local::LB_PORT,
        ];
        let soak = [
            ports::UPSTREAM,
            ports::HAPROXY,
            ports::REDIS,
            ports::REDIS_REPLICA,
            ports::POSTGRES,
            ports::gateway(1),
            ports::gateway(2),
            ports::admin(1),
            ports::admin(2),
        ];
        assert!(soak.iter().all(|p| !bench.contains(p)));
        let v: serde_json::Value = serde_json::from_str(&ports_json()).unwrap();
        assert_eq!(v["admins"][1], 18122);
    }
}
