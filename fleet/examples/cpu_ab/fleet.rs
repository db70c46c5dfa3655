//! cpu_ab's fleet: Redis, Postgres and the demo upstream the variants share, one replica
//! per variant, and each variant's warm-up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemgate_fleet::bench::durable_redis;
use idemgate_fleet::{free_port, http_status, PgServer, RedisServer, Replica, Upstream};

use crate::options::{Options, Pg};
use crate::{wrk, Variant};

/// What every variant shares. Fields drop in this order: the upstream first, the
/// temporary directory last.
pub struct Services {
    pub upstream: Upstream,
    pub pg: Option<PgServer>,
    /// Redis' replica, with `--redis durable`.
    pub replica: Option<RedisServer>,
    pub redis: RedisServer,
    /// The configurations, wrappers, logs and perf outputs.
    pub dir: tempfile::TempDir,
}

impl Services {
    /// Redis (durable, with a replica, and its markers backdated as `o` asks), Postgres
    /// with `--pg on` (keeping its commits with `--pg durable`), and the demo upstream of
    /// the workspace at `root`.
    pub fn start(o: &Options, root: &Path) -> Services {
        let dir = tempfile::tempdir().unwrap();
        let redis = match o.durable {
            true => RedisServer::start_with(idemgate_fleet::DURABLE_REDIS),
            false => RedisServer::start(),
        };
        let port = redis.port.to_string();
        let replica = o.durable.then(|| {
            let mut args = idemgate_fleet::DURABLE_REDIS.to_vec();
            args.extend(["--replicaof", "127.0.0.1", &port]);
            RedisServer::start_with(&args)
        });
        // Vouched claims ask the replica for every round: a round sent while it still
        // synchronises comes back short and the shard writes its claims through until
        // the probe sees the replica again, so the first round would measure that.
        if let Some(replica) = &replica {
            let in_sync = || durable_redis::replicated(redis.port, replica.port);
            durable_redis::wait_for(
                "redis replica in sync",
                durable_redis::SYNC_TIMEOUT,
                in_sync,
            )
            .unwrap();
        }
        if o.warm {
            idemgate_fleet::bench::warm::backdate_two_days(redis.port).unwrap();
        }
        let pg = match o.pg {
            Pg::Durable => Some(PgServer::start_durable()),
            Pg::On => Some(PgServer::start()),
            Pg::Off => None,
        };
        let upstream = Upstream::start(
            &root.join("target/release/demo-upstream"),
            dir.path(),
            &[("RUST_LOG".into(), "warn".into())],
        );
        Services {
            upstream,
            pg,
            replica,
            redis,
            dir,
        }
    }

    /// Redis' CPU: the primary's, and the replica's where there is one.
    pub fn redis_info_cpu(&self) -> String {
        let mut info = self.redis.cli(&["INFO", "cpu"]);
        if let Some(r) = &self.replica {
            info.push_str(&r.cli(&["INFO", "cpu"]));
        }
        info
    }
}

/// Redis' CPU seconds (user + sys) in `INFO cpu` answers.
pub fn redis_cpu(info: &str) -> f64 {
    info.lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

/// One replica per `LABEL=BINARY[|KEY=VALUE...]` of `specs`, started, against `s`.
pub fn start_variants(specs: &[String], s: &Services) -> Vec<Variant> {
    let dir = &s.dir;
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut parts = spec.split('|');
            let (label, bin) = parts.next().unwrap().split_once('=').unwrap();
            let env: Vec<(String, String)> = parts
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect();
            let (port, admin) = (free_port(), free_port());
            let config = dir.path().join(format!("gw-{i}.toml"));
            write_config(&config, s, port, admin);
            let bin = with_env(dir.path(), i, bin, &env);
            let mut replica = Replica::new(
                &bin,
                i,
                port,
                admin,
                config,
                dir.path().join(format!("gw-{i}.log")),
            );
            replica.start();
            Variant {
                label: label.to_string(),
                replica,
                load: Vec::new(),
                rows: Vec::new(),
            }
        })
        .collect()
}

/// A replica's configuration at `config`: listening on `port` and `admin`, the one
/// route to the demo upstream, Redis and Postgres (where there is one) of `s`.
fn write_config(config: &Path, s: &Services, port: u16, admin: u16) {
    let pg_section = s.pg.as_ref().map(|p| p.section("")).unwrap_or_default();
    std::fs::write(
        config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             [log]\nfilter = \"warn\"\n[redis]\nurl = \"{}\"\n{pg_section}\n\
             [idempotency]\nanonymous = \"shared\"\n\
             [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n",
            s.redis.url(),
            s.upstream.url()
        ),
    )
    .unwrap();
}

/// `bin`, or with `env` a wrapper in `dir` that execs it with that environment (same
/// pid).
fn with_env(dir: &Path, i: usize, bin: &str, env: &[(String, String)]) -> PathBuf {
    if env.is_empty() {
        return PathBuf::from(bin);
    }
    let wrapper = dir.join(format!("gw-{i}.sh"));
    let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
    let abs = std::fs::canonicalize(bin).unwrap();
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec env {} {} \"$@\"\n",
            vars.join(" "),
            abs.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&wrapper)
        .status()
        .unwrap();
    wrapper
}

/// Waits for each variant to be ready, then warms it up for a second; sets each one's
/// measured load (first executions, or with `--replay` the keys the warm-up stored).
pub fn warm_up(variants: &mut [Variant], o: &Options) {
    for v in variants.iter_mut() {
        let mut ready = false;
        for _ in 0..200 {
            if http_status(v.replica.admin, "/readyz", Duration::from_secs(1)) == Some(200) {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(ready, "{} not ready: {}", v.label, v.replica.log_text());
        let warm = format!("warm-{}", v.label);
        let (stored, _) = wrk(
            v.replica.port,
            (o.conns, 1),
            1,
            &["unique".into(), warm.clone()],
        );
        // wrk -t1: the warm-up's keys are warm-LABEL-1-1 ..= warm-LABEL-1-<stored>.
        v.load = if o.replay {
            vec![
                "replay".into(),
                format!("{warm}-1"),
                (stored as u64).to_string(),
            ]
        } else {
            vec!["unique".into()]
        };
    }
}
