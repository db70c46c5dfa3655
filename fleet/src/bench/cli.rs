//! `idemgate-fleet bench ...`, run from the repository root by `loadtest/bench/run.sh`
//! and `loadtest/bench/bench.py`:
//!
//! ```text
//! bench ports                                  the fixed ports, as JSON
//! bench start redis|redis-cluster|patroni|postgres|upstream|nginx|peer|otlp
//!                                              (`redis`: the primary and its replica)
//! bench start haproxy REPLICAS [--rolling]   (drained by its runtime API, keyed retries)
//! bench start gateways REPLICAS [--log LEVEL] [--redis-only] [--redis-cluster] [--toml TEXT]
//!       [--env KEY=VALUE]... [--replica-env I:KEY=VALUE]... [--replica-redis-only I]...
//!       [--only I]                             (replica I only, the others left running)
//!       [--bin PATH]                           (run by PATH: the last release's binary)
//! bench stop NAME...                           (`gateways` = every replica,
//!                                              `redis` = the primary and its replica,
//!                                              `redis-cluster` = every cluster node,
//!                                              `patroni` = etcd and every node)
//! bench patroni-replication sync|async         switch the running Patroni set
//! bench seed-postgres RECORDS                  fill the records table (seeded.rs)
//! bench rewarm [--port P]                      every warmth marker of the bench's Redis
//!                                              (or the one on P) two days old again
//!                                              (durable_redis.rs)
//! bench down                                   stop everything
//! bench ps                                     running parts and pids, as JSON
//! bench h2c-load URL unique|replay ...         the h2c rows' load client (h2c_load.rs)
//! ```
//!
//! Progress goes to stderr; `start`, `stop` and `ps` end by printing the running parts
//! as one JSON line on stdout (`{"gw-1": 1234, "redis": 99, ...}`), which is what the
//! driver reads for its CPU column.

use std::process::ExitCode;

use super::{ports, Bench, GatewayOptions};
use crate::patroni::Replication;

pub(super) fn running_json(bench: &Bench) -> String {
    let parts: Vec<String> = (bench.running().into_iter())
        .map(|(n, p)| format!("\"{n}\": {p}"))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn ports_json() -> String {
    format!(
        "{{\"upstream\": {}, \"nginx\": {}, \"haproxy\": {}, \"haproxy_admin\": {}, \"peer\": {}, \"otlp\": {}, \"redis\": {}, \
         \"redis_replica\": {}, \"postgres\": {}, \"gateway_base\": {}, \"admin_base\": {}, \"redis_cluster\": {:?}, \
         \"patroni_pg\": {:?}, \"patroni_rest\": {:?}, \"patroni_etcd\": {:?}, \"patroni_url\": \"{}\"}}",
        ports::UPSTREAM,
        ports::NGINX,
        ports::HAPROXY,
        ports::HAPROXY_ADMIN,
        ports::PEER,
        ports::OTLP,
        ports::REDIS,
        ports::REDIS_REPLICA,
        ports::POSTGRES,
        ports::gateway(0),
        ports::admin(0),
        ports::REDIS_CLUSTER,
        ports::PATRONI_PG,
        ports::PATRONI_REST,
        [ports::PATRONI_ETCD.0, ports::PATRONI_ETCD.1],
        super::patroni::url()
    )
}

fn replicas(arg: Option<&String>) -> Result<u16, String> {
    let arg = arg.ok_or("the number of replicas is missing")?;
    arg.parse()
        .map_err(|_| format!("replicas must be a number (got '{arg}')"))
}

fn key_value(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE (got '{s}')"))?;
    Ok((k.to_string(), v.to_string()))
}

/// Parses `REPLICAS [--log L] [--redis-only] [--redis-cluster] [--toml T] [--env K=V]...
/// [--replica-env I:K=V]... [--replica-redis-only I]... [--only I] [--bin PATH]`.
pub fn gateway_options(args: &[String]) -> Result<GatewayOptions, String> {
    let mut opts = GatewayOptions {
        replicas: replicas(args.first())?,
        ..Default::default()
    };
    let mut it = args[1..].iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--log" => opts.log = value()?.clone(),
            "--redis-only" => opts.postgres = false,
            "--redis-cluster" => opts.redis_cluster = true,
            "--replica-redis-only" => {
                let v = value()?;
                let i = v.parse().map_err(|_| format!("bad replica index '{v}'"))?;
                opts.redis_only_replicas.push(i);
            }
            "--only" => {
                let v = value()?;
                let i = v.parse().map_err(|_| format!("bad replica index '{v}'"))?;
                if !(1..=opts.replicas).contains(&i) {
                    return Err(format!(
                        "--only {i}: not one of the {} replicas",
                        opts.replicas
                    ));
                }
                opts.only = Some(i);
            }
            "--bin" => opts.bin = Some(value()?.into()),
            "--toml" => opts.extra_toml.push_str(&format!("{}\n", value()?)),
            "--env" => opts.env.push(key_value(value()?)?),
            "--replica-env" => {
                let v = value()?;
                let (i, kv) = v
                    .split_once(':')
                    .ok_or_else(|| format!("expected I:KEY=VALUE (got '{v}')"))?;
                let i = i
                    .parse()
                    .map_err(|_| format!("bad replica index in '{v}'"))?;
                let (k, v) = key_value(kv)?;
                opts.replica_env.push((i, k, v));
            }
            other => return Err(format!("unknown gateway option '{other}'")),
        }
    }
    Ok(opts)
}

fn run(bench: &Bench, args: &[String]) -> Result<(), String> {
    let cmd = args.first().map(String::as_str).unwrap_or_default();
    let rest = args.get(1..).unwrap_or_default();
    match (cmd, rest.first().map(String::as_str)) {
        ("ports", _) => {
            println!("{}", ports_json());
            return Ok(());
        }
        ("h2c-load", _) => return super::h2c_load::main(rest),
        ("start", Some("redis")) => bench.start_redis()?,
        ("start", Some("redis-cluster")) => bench.start_redis_cluster()?,
        ("start", Some("patroni")) => bench.start_patroni()?,
        ("patroni-replication", Some("sync")) => bench.patroni_replication(Replication::Sync)?,
        ("patroni-replication", Some("async")) => bench.patroni_replication(Replication::Async)?,
        ("start", Some("postgres")) => bench.start_postgres()?,
        ("seed-postgres", Some(n)) => bench.seed_postgres(
            n.parse()
                .map_err(|_| format!("records must be a number (got '{n}')"))?,
        )?,
        ("rewarm", None) => bench.rewarm()?,
        ("rewarm", Some("--port")) => {
            let port = rest.get(1).and_then(|p| p.parse().ok());
            let port = port.ok_or("rewarm --port needs a port number")?;
            super::warm::backdate_two_days(port)?
        }
        ("start", Some("upstream")) => bench.start_upstream()?,
        ("start", Some("nginx")) => bench.start_nginx()?,
        ("start", Some("peer")) => bench.start_peer()?,
        ("start", Some("otlp")) => bench.start_otlp()?,
        ("start", Some("haproxy")) => {
            let rolling = match rest.get(2).map(String::as_str) {
                None => false,
                Some("--rolling") => true,
                Some(other) => return Err(format!("unknown haproxy option '{other}'")),
            };
            bench.start_haproxy(replicas(rest.get(1))?, rolling)?
        }
        ("start", Some("gateways")) => bench.start_gateways(&gateway_options(&rest[1..])?)?,
        ("stop", Some(_)) => bench.stop(rest),
        ("down", _) => bench.down(),
        ("ps", _) => {}
        _ => return Err("usage: idemgate-fleet bench ports|start PART|stop NAME...|rewarm|down|ps (see fleet/src/bench/cli.rs)".into()),
    }
    println!("{}", running_json(bench));
    Ok(())
}

/// `idemgate-fleet bench ARGS` (ARGS without `bench`).
pub fn main(args: &[String]) -> ExitCode {
    let root = match std::env::current_dir() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&Bench::new(&root), args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn gateway_options_parse_every_flag() {
        let o = gateway_options(&args(
            "3 --log info --redis-only --redis-cluster --env A=1=2 --replica-env 2:B=x --toml [x] --replica-redis-only 3 --only 2",
        ))
        .unwrap();
        assert_eq!(o.replicas, 3);
        assert_eq!(o.log, "info");
        assert!(!o.postgres);
        assert!(o.redis_cluster);
        assert_eq!(o.env, vec![("A".into(), "1=2".into())]);
        assert_eq!(o.replica_env, vec![(2, "B".into(), "x".into())]);
        assert_eq!(o.extra_toml, "[x]\n");
        assert_eq!(o.redis_only_replicas, vec![3]);
        assert_eq!(o.only, Some(2));
        assert!(gateway_options(&args("2 --only 3")).is_err());
        assert!(gateway_options(&args("2 --bogus")).is_err());
        assert!(gateway_options(&args("2 --env NOEQUALS")).is_err());
        assert!(gateway_options(&args("two")).is_err());
        assert!(!gateway_options(&args("2")).unwrap().redis_cluster);
    }

    #[test]
    fn gateway_options_name_another_binary() {
        let o = gateway_options(&args("1 --bin /tmp/base/idemgate-release --log warn")).unwrap();
        assert_eq!(
            o.bin,
            Some(std::path::PathBuf::from("/tmp/base/idemgate-release"))
        );
        assert_eq!(o.log, "warn");
        assert_eq!(gateway_options(&args("1")).unwrap().bin, None);
        assert!(gateway_options(&args("1 --bin")).is_err());
        assert_ne!(o.file_name(true), GatewayOptions::default().file_name(true));
    }

    #[test]
    fn ports_are_json_with_the_cluster_nodes() {
        let p = ports_json();
        assert!(
            p.contains("\"redis_cluster\": [16391, 16392, 16393], "),
            "{p}"
        );
        assert!(p.contains("\"patroni_pg\": [15491, 15492, 15493], "), "{p}");
        let v: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert_eq!(v["patroni_etcd"][0], 12379);
        assert_eq!(v["redis"], 16390);
        assert_eq!(v["redis_replica"], 16394);
        assert!(v["patroni_url"]
            .as_str()
            .unwrap()
            .contains(",127.0.0.1:15493/idemgate?"));
    }
}
