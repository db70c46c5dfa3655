//! The gateway configuration of `make bench`: one generated TOML file per row
//! ([`GatewayOptions::render`]): fixed loopback ports, the bench's Redis (or its Redis
//! Cluster: `redis.mode = "cluster"` with the three nodes as seeds), its Postgres
//! (unless the row runs Redis only), one route to the demo upstream, and whatever the
//! row adds: a log filter, extra TOML (a new section such as encryption at rest), and
//! environment overrides (`IDEMGATE__SECTION__KEY=...`, `TOKIO_WORKER_THREADS`,
//! `LD_PRELOAD`) for every replica or for one, and another binary to run them with
//! (the last release's, for the rows against it). The soak's replicas are configured the
//! same way, on the soak's ports ([`Ports`]).
//!
//! The generated file names only keys the last release reads too (`server.listen`,
//! `admin_listen`, `shutdown_grace`, `log.filter`, `redis.url` or `mode` and `nodes`,
//! `postgres.url`, a route's `name`, `path_prefix`, `upstream`, `upstream_timeout`): every
//! section refuses unknown keys, so the base rows (`--bin`) start from the same file. A
//! key newer than that belongs in a row's `--env` or `--toml`, which the base rows leave out.

use std::path::PathBuf;

use super::ports;

/// Where the parts a configuration names listen: the bench's ([`Ports::BENCH`]) or the
/// soak's (`soak::ports::PORTS`). Replica i (1-based) listens on `gateway_base + i`,
/// its admin listener on `admin_base + i`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ports {
    pub redis: u16,
    pub postgres: u16,
    pub upstream: u16,
    pub gateway_base: u16,
    pub admin_base: u16,
}

impl Ports {
    /// `make bench`'s ([`ports`]).
    pub const BENCH: Ports = Ports {
        redis: ports::REDIS,
        postgres: ports::POSTGRES,
        upstream: ports::UPSTREAM,
        gateway_base: ports::GATEWAY_BASE,
        admin_base: ports::ADMIN_BASE,
    };

    pub fn gateway(&self, i: u16) -> u16 {
        self.gateway_base + i
    }

    pub fn admin(&self, i: u16) -> u16 {
        self.admin_base + i
    }
}

/// What one bench row asks of its gateway replicas.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayOptions {
    pub replicas: u16,
    /// `log.filter` (the bench's default is `warn`).
    pub log: String,
    /// Whether the `[postgres]` section is written (the durable tier on); off for the
    /// Redis-only rows.
    pub postgres: bool,
    /// Whether the replicas talk to the bench's Redis Cluster (`redis.mode = "cluster"`,
    /// `redis.nodes` = its three nodes) instead of the one Redis.
    pub redis_cluster: bool,
    /// Replicas (1-based) that run Redis only although `postgres` is on (the latency
    /// phase runs differently configured replicas side by side).
    pub redis_only_replicas: Vec<u16>,
    /// TOML appended to the generated file, for settings with no environment form.
    pub extra_toml: String,
    /// Environment of every replica.
    pub env: Vec<(String, String)>,
    /// Environment of one replica (1-based index), after `env`.
    pub replica_env: Vec<(u16, String, String)>,
    /// Start only this replica of `replicas` (1-based): one replica restarted with
    /// other settings while the others serve.
    pub only: Option<u16>,
    /// Where Redis, Postgres, the upstream and the replicas listen.
    pub ports: Ports,
    /// The binary the replicas run (the last release's, for the rows against it);
    /// `None`: the bench's own ([`super::Bench::idemgate`]).
    pub bin: Option<PathBuf>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            log: "warn".into(),
            postgres: true,
            redis_cluster: false,
            redis_only_replicas: Vec::new(),
            extra_toml: String::new(),
            env: Vec::new(),
            replica_env: Vec::new(),
            only: None,
            ports: Ports::BENCH,
            bin: None,
        }
    }
}

impl GatewayOptions {
    /// Whether replica `i` writes through to Postgres.
    pub fn postgres_for(&self, i: u16) -> bool {
        self.postgres && !self.redis_only_replicas.contains(&i)
    }

    /// The configuration file, with or without `[postgres]` (replica 1's ports; the
    /// others get theirs from the environment, see [`GatewayOptions::env_of`]).
    pub fn render(&self, postgres: bool) -> String {
        let postgres = if postgres {
            format!(
                "\n[postgres]\nurl = \"postgres://postgres@127.0.0.1:{}/postgres\"\n",
                self.ports.postgres
            )
        } else {
            "\n# no postgres section: Redis only\n".into()
        };
        let redis = if self.redis_cluster {
            let nodes: Vec<String> = (ports::REDIS_CLUSTER.iter())
                .map(|p| format!("\"redis://127.0.0.1:{p}\""))
                .collect();
            // A deployment of its own (its own key prefix): beside the bench's Redis and
            // on the same Postgres, the cluster's empty slots under the same prefix would
            // read as that Redis having lost its data, and claims would wait out the
            // quarantine once a vouched row had kept claims in Redis alone.
            format!(
                "mode = \"cluster\"\nkey_prefix = \"idemgate-cluster\"\nnodes = [{}]",
                nodes.join(", ")
            )
        } else {
            format!("url = \"redis://127.0.0.1:{}\"", self.ports.redis)
        };
        format!(
            "# generated by idemgate-fleet (make bench, make soak)
[server]
listen = \"127.0.0.1:{gw}\"
admin_listen = \"127.0.0.1:{admin}\"
shutdown_grace = \"3s\"

[log]
filter = \"{log}\"

[redis]
{redis}
{postgres}
# The load generators send a tenant in `Authorization` (`Bearer bench-tenant`, `Bearer
# soak-tenant`), the default tenant header; keyed requests without one are refused.

[[routes]]
name = \"payments\"
path_prefix = \"/v1/\"
upstream = \"http://127.0.0.1:{upstream}\"
upstream_timeout = \"20s\"
{extra}",
            gw = self.ports.gateway(1),
            admin = self.ports.admin(1),
            log = self.log,
            upstream = self.ports.upstream,
            extra = self.extra_toml,
        )
    }

    /// The environment of replica `i`: its listeners, the row's overrides, and no
    /// `RUST_LOG` (`log.filter` decides).
    pub fn env_of(&self, i: u16) -> Vec<(String, String)> {
        let mut env = vec![
            ("NO_COLOR".to_string(), "1".to_string()),
            (
                "IDEMGATE__SERVER__LISTEN".into(),
                format!("127.0.0.1:{}", self.ports.gateway(i)),
            ),
            (
                "IDEMGATE__SERVER__ADMIN_LISTEN".into(),
                format!("127.0.0.1:{}", self.ports.admin(i)),
            ),
        ];
        env.extend(self.env.iter().cloned());
        env.extend(
            (self.replica_env.iter())
                .filter(|(r, _, _)| *r == i)
                .map(|(_, k, v)| (k.clone(), v.clone())),
        );
        env
    }

    /// A file name that tells rows apart in `.state/bench/`.
    pub fn file_name(&self, postgres: bool) -> String {
        let store = if postgres { "" } else { "-redis-only" };
        let topology = if self.redis_cluster { "-cluster" } else { "" };
        let bin = if self.bin.is_some() { "-bin" } else { "" };
        format!("idemgate-{}{store}{topology}{bin}.toml", self.log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_only_rows_have_no_postgres_section() {
        let opts = GatewayOptions {
            replicas: 3,
            redis_only_replicas: vec![3],
            ..Default::default()
        };
        assert!(opts.postgres_for(1) && !opts.postgres_for(3));
        let with = opts.render(opts.postgres_for(1));
        assert!(with.contains("[postgres]\nurl = \"postgres://postgres@127.0.0.1:15490/postgres\""));
        let without = GatewayOptions {
            postgres: false,
            ..Default::default()
        };
        assert!(!without.postgres_for(1));
        assert!(!without.render(false).contains("[postgres]"));
        assert_ne!(opts.file_name(true), opts.file_name(false));
    }

    #[test]
    fn cluster_rows_name_the_three_nodes_as_seeds() {
        let opts = GatewayOptions {
            redis_cluster: true,
            ..Default::default()
        };
        let text = opts.render(false);
        assert!(
            text.contains(
                "[redis]\nmode = \"cluster\"\nkey_prefix = \"idemgate-cluster\"\n\
                 nodes = [\"redis://127.0.0.1:16391\", \
             \"redis://127.0.0.1:16392\", \"redis://127.0.0.1:16393\"]\n"
            ),
            "{text}"
        );
        assert!(!text.contains("url = \"redis://"));
        let one = GatewayOptions::default().render(false);
        assert!(one.contains("[redis]\nurl = \"redis://127.0.0.1:16390\"\n"));
        assert_ne!(
            opts.file_name(false),
            GatewayOptions::default().file_name(false)
        );
    }

    /// `section.key` of every key a generated file sets (no extra TOML).
    fn keys(text: &str) -> Vec<String> {
        let mut section = String::new();
        let mut out = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix('[') {
                section = name.trim_matches(|c| c == '[' || c == ']').to_string();
            } else if let Some((key, _)) = line.split_once(" = ") {
                out.push(format!("{section}.{key}"));
            }
        }
        out
    }

    #[test]
    fn the_generated_file_names_only_keys_the_last_release_reads() {
        // What the base commit's (tests/upgrade/base-commit) schema knows of them.
        let known = [
            "server.listen",
            "server.admin_listen",
            "server.shutdown_grace",
            "log.filter",
            "redis.url",
            "redis.mode",
            "redis.nodes",
            "redis.key_prefix",
            "postgres.url",
            "routes.name",
            "routes.path_prefix",
            "routes.upstream",
            "routes.upstream_timeout",
        ];
        let cluster = GatewayOptions {
            redis_cluster: true,
            ..Default::default()
        };
        for text in [
            GatewayOptions::default().render(true),
            GatewayOptions::default().render(false),
            cluster.render(true),
        ] {
            let found = keys(&text);
            assert!(found.len() >= 9, "{found:?}");
            let new: Vec<&String> = found
                .iter()
                .filter(|k| !known.contains(&k.as_str()))
                .collect();
            assert!(new.is_empty(), "keys the last release refuses: {new:?}");
        }
    }

    #[test]
    fn extra_toml_and_environment_reach_the_replica() {
        let opts = GatewayOptions {
            replicas: 2,
            log: "info".into(),
            extra_toml: "[encryption]\nkey_file = \"k\"\n".into(),
            env: vec![("A".into(), "1".into())],
            replica_env: vec![(2, "B".into(), "2".into())],
            ..Default::default()
        };
        let text = opts.render(true);
        assert!(text.contains("filter = \"info\""));
        assert!(text.ends_with("[encryption]\nkey_file = \"k\"\n"));
        let env2 = opts.env_of(2);
        assert!(env2.contains(&("A".into(), "1".into())));
        assert!(env2.contains(&("B".into(), "2".into())));
        assert!(env2.contains(&("IDEMGATE__SERVER__LISTEN".into(), "127.0.0.1:18012".into())));
        assert!(!opts.env_of(1).contains(&("B".into(), "2".into())));
    }
}
