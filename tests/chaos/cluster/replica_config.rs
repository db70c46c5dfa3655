//! The gateway configuration each replica of a scenario gets, and whether this build
//! accepts it ([`config_accepted`]).

use std::process::Command;

use idemgate_fleet::{Host, SENTINEL_SERVICE};

use super::*;

/// The gateway configuration of replica `index` (its proxy and admin ports).
pub(super) fn replica_toml(
    opts: &Options,
    index: usize,
    host: &Host,
    (port, admin): (u16, u16),
    redis: &RedisAt,
    pg: Option<&str>,
    upstream: &str,
) -> String {
    let (redis_lines, sentinel) = match redis {
        RedisAt::Url(url) => (format!("url = \"{url}\"\n"), String::new()),
        RedisAt::Cluster(nodes) => (
            format!("mode = \"cluster\"\nnodes = {nodes:?}\n"),
            String::new(),
        ),
        RedisAt::Sentinel(nodes) => (
            "mode = \"sentinel\"\n".to_string(),
            format!("[redis.sentinel]\nservice_name = \"{SENTINEL_SERVICE}\"\nnodes = {nodes:?}\n"),
        ),
    };
    let postgres = match (opts.durability, pg) {
        (Durability::RedisOnly, _) | (_, None) => String::new(),
        (d, Some(url)) => format!(
            "[postgres]\nurl = \"{url}\"\nstatement_timeout = \"1s\"\npool_size = 8\n\
             claims = \"{}\"\n{}{}\n",
            match d {
                Durability::Mixed if index == 0 => "write_through",
                Durability::Vouched | Durability::Mixed => "vouched",
                d if d.claims_written_through() => "write_through",
                _ => "redis",
            },
            if d == Durability::FilledOnReplay {
                "redis_fill = \"on_replay\"\n"
            } else {
                ""
            },
            opts.postgres,
        ),
    };
    format!(
        "[server]\nlisten = \"{ip}:{port}\"\nadmin_listen = \"{ip}:{admin}\"\n\
         shutdown_grace = \"{grace}\"\n{server}\n\
         [log]\nformat = \"text\"\nfilter = \"{filter}\"\n\
         [redis]\n{redis_lines}command_timeout = \"{ct}\"\nconnect_timeout = \"500ms\"\n\
         probe_interval = \"100ms\"\n{redis_extra}\n{sentinel}\
         {postgres}\
         [idempotency]\nttl = \"1h\"\nlock_ttl = \"{lock}\"\n{extra}\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{upstream}\"\n\
         upstream_timeout = \"{ut}\"\n{more}",
        ip = host.ip,
        redis_extra = opts.redis,
        grace = opts.shutdown_grace,
        server = opts.server,
        more = opts.extra,
        lock = opts.lock_ttl,
        extra = opts.idempotency,
        ut = opts.upstream_timeout,
        ct = opts.command_timeout,
        filter = std::env::var("CHAOS_LOG_FILTER").unwrap_or_else(|_| "info".into()),
    )
}

/// Whether this build of `idemgate` accepts the configuration of every replica
/// (`check-config`; replicas 0 and 1 stand for all: only a `Mixed` fleet's first one
/// differs): used to find out if a behaviour (lease heartbeat, `on_ambiguous`) is present.
pub fn config_accepted(opts: &Options) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    for index in 0..opts.replicas.clamp(1, 2) {
        let path = dir.path().join(format!("check{index}.toml"));
        let toml = replica_toml(
            opts,
            index,
            &Host::loopback(),
            (8080, 9090),
            &RedisAt::Url("redis://127.0.0.1:6379".into()),
            Some("postgres://postgres@127.0.0.1:5432/postgres"),
            "http://127.0.0.1:3000",
        );
        std::fs::write(&path, toml).unwrap();
        let out = Command::new(IDEMGATE)
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
    }
    Ok(())
}
