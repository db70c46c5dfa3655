//! `idemgate-fleet up|down|status`: the local fleet of `make up` (fixed loopback
//! ports, state in `.state/` under the current directory, which must be the
//! repository root). Environment, as `deploy/local/up.sh` and `down.sh` read it:
//! `REPLICAS` (1..8, default 3), `REDIS` (`standalone`, the default, `cluster` or
//! `sentinel`: see `local/redis_tier.rs`), `POSTGRES` (`single`, the default, or
//! `patroni`: see `local/pg_tier.rs`), `PROTO` (what HAProxy speaks to the
//! replicas: `http1`, the default, or `h2`), `IDEMGATE_CONFIG` (default
//! `deploy/local/idemgate.toml`), `READY_TIMEOUT` (seconds, default 30),
//! `GRACE_SECONDS` (default 10), `GATEWAY_GRACE_SECONDS` (default 35) and
//! `FLEET_BIN_DIR` (where `idemgate` and `demo-upstream` are; default
//! `target/release`). Installing packages and building stay with the caller.
//! `idemgate-fleet bench ...` is the fleet of `make bench` (see `bench/cli.rs`),
//! `idemgate-fleet soak ...` the fleet of `make soak` (see `bench/soak.rs`), and
//! `idemgate-fleet redis ...` and `postgres ...` a Redis or a Postgres for a measurement
//! script (see `serve_redis.rs`, `serve_postgres.rs`), and `idemgate-fleet otlp ...` a
//! trace receiver (see `otlp.rs`).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use idemgate_fleet::local::{Local, PgTier, Topology};
use idemgate_fleet::BackendProto;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn secs(name: &str, default: u64) -> Result<Duration, String> {
    let v = env_or(name, &default.to_string());
    v.parse()
        .map(Duration::from_secs)
        .map_err(|_| format!("{name} must be a number of seconds (got '{v}')"))
}

fn run(cmd: &str) -> Result<bool, String> {
    let root = std::env::current_dir().map_err(|e| e.to_string())?;
    let replicas = env_or("REPLICAS", "3");
    let replicas: u16 = replicas
        .parse()
        .map_err(|_| format!("REPLICAS must be a number from 1 to 8 (got '{replicas}')"))?;
    let config = PathBuf::from(env_or("IDEMGATE_CONFIG", "deploy/local/idemgate.toml"));
    let bin_dir = PathBuf::from(env_or("FLEET_BIN_DIR", "target/release"));
    let mut local = Local::new(&root, &root.join(bin_dir), &config, replicas);
    local.ready_timeout = secs("READY_TIMEOUT", 30)?;
    local.redis = Topology::parse(&env_or("REDIS", "standalone"))?;
    local.proto = BackendProto::parse(&env_or("PROTO", "http1"))?;
    local.postgres = PgTier::parse(&env_or("POSTGRES", "single"))?;
    match cmd {
        "up" => local.up().map(|()| true),
        "down" => {
            local.down(
                secs("GRACE_SECONDS", 10)?,
                secs("GATEWAY_GRACE_SECONDS", 35)?,
            );
            Ok(true)
        }
        "status" => Ok(local.status()),
        _ => Err("usage: idemgate-fleet up|down|status".into()),
    }
}

fn main() -> ExitCode {
    let cmd = std::env::args().nth(1).unwrap_or_default();
    if cmd == "bench" {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return idemgate_fleet::bench::main(&args);
    }
    if cmd == "postgres" {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return idemgate_fleet::serve_postgres::main(&args);
    }
    if cmd == "otlp" {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return idemgate_fleet::otlp::main(&args);
    }
    if cmd == "redis" {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return idemgate_fleet::serve_redis::main(&args);
    }
    if cmd == "soak" {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return idemgate_fleet::bench::soak::main(&args);
    }
    match run(&cmd) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(3),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
