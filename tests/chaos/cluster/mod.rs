//! One scenario's fleet, all on free loopback ports, all real processes: redis-server
//! (one, or a Redis Cluster of six nodes, or a primary and replica under three sentinels:
//! [`Topology`]),
//! PostgreSQL (`initdb` + `postgres`, optional), the demo upstream binary, N gateway
//! replicas (`idemgate serve` with a generated TOML file each) and HAProxy in front
//! (round robin, health check on each replica's admin `/readyz`). The processes are
//! the fleet launcher's parts (`fleet/`, crate `idemgate_fleet`); this file chooses
//! the scenario's options, writes the replicas' configuration and waits on them.
//! With [`Options::partitions`], every part runs in a network namespace of its own on
//! one bridge (the launcher's `NetLab`; [`Places`] names them), so that a scenario can
//! cut and heal the links between them. With [`Options::pg_ha`], Postgres is a
//! Patroni set (etcd and three nodes, the launcher's `PatroniSet`), reached through a
//! multi-host URL or through HAProxy ([`PgVia`]). Everything is killed when the
//! [`Stack`] is dropped, and the namespaces are deleted after that.

use idemgate_fleet::Replication;

mod places;
mod probe;
mod replica_config;
mod stack;

pub use places::Places;
pub use probe::{Ledger, Probe};
pub use replica_config::config_accepted;
use replica_config::replica_toml;
use stack::RedisAt;
pub use stack::Stack;

pub const IDEMGATE: &str = env!("CARGO_BIN_EXE_idemgate");
pub const DEMO_UPSTREAM: &str = env!("CARGO_BIN_EXE_demo-upstream");

/// Where claims and completed responses live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// No `[postgres]`.
    RedisOnly,
    /// `[postgres]` with `claims = "redis"` (set explicitly: the default is `vouched`).
    Postgres,
    /// `[postgres]` with `claims = "write_through"` (the default before 0.6.0).
    WriteThrough,
    /// As `WriteThrough`, with `redis_fill = "on_replay"`: completions write Postgres only.
    FilledOnReplay,
    /// `[postgres]` with `claims = "vouched"` (the default), every Redis server run as the mode relies
    /// on (`idemgate_fleet::DURABLE_REDIS`: AOF fsync'd before every reply, no eviction).
    Vouched,
    /// A fleet half-way through a switch to vouched claims: replica 0 (started first)
    /// keeps `claims = "write_through"`, the others run `Vouched`.
    Mixed,
}

impl Durability {
    /// Postgres decides who holds a key: claims are committed there before forwarding.
    pub fn claims_written_through(self) -> bool {
        matches!(self, Durability::WriteThrough | Durability::FilledOnReplay)
    }

    /// Every claim is durable before it is forwarded (written through, or kept by a
    /// Redis that vouches for it): the key runs once whatever fails.
    pub fn claims_durable(self) -> bool {
        self.claims_written_through() || matches!(self, Durability::Vouched | Durability::Mixed)
    }

    /// The extra arguments of every Redis server of the fleet.
    pub fn redis_args(self) -> &'static [&'static str] {
        match self {
            Durability::Vouched | Durability::Mixed => idemgate_fleet::DURABLE_REDIS,
            _ => &[],
        }
    }
}

/// Which Redis the replicas talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One `redis-server` (`redis.mode = "standalone"`).
    Single,
    /// Six nodes, three primaries with a replica each (`redis.mode = "cluster"`).
    Cluster,
    /// A primary and a replica under three sentinels (`redis.mode = "sentinel"`).
    Sentinel,
}

/// How the replicas reach a Patroni set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgVia {
    /// `postgres://...@n0,n1,n2/idemgate?target_session_attrs=read-write`.
    MultiHost,
    /// The same, the primary at start listed first: the host a fault on the primary
    /// makes silent is the one every new connection tries first.
    MultiHostPrimaryFirst,
    /// HAProxy in TCP mode, routing to the node whose REST API says `/primary`.
    Haproxy,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub replicas: usize,
    pub topology: Topology,
    /// Extra lines in `[redis]` (`replica_acks = 1`, ...).
    pub redis: String,
    pub durability: Durability,
    /// Extra `redis-server` arguments.
    pub redis_args: Vec<String>,
    pub lock_ttl: String,
    pub upstream_timeout: String,
    /// Extra lines in `[idempotency]`.
    pub idempotency: String,
    /// Extra lines in `[postgres]` (the completer's settings, ...).
    pub postgres: String,
    /// Environment of the demo upstream (`DEMO_FAIL_RATE`, `DEMO_RESET_RATE`, ...).
    pub upstream_env: Vec<(String, String)>,
    /// Replicas whose Redis traffic goes through the fault proxy.
    pub via_fault_proxy: Vec<usize>,
    pub shutdown_grace: String,
    /// `redis.command_timeout`.
    pub command_timeout: String,
    /// HAProxy's `option abortonclose`: a client that hangs up aborts its request on
    /// the replica too (without it, HAProxy waits for the replica's answer, so the
    /// gateway never sees the hang-up).
    pub abort_on_close: bool,
    /// Extra lines in `[server]`.
    pub server: String,
    /// Extra TOML after the `payments` route (more routes, other sections).
    pub extra: String,
    /// Every part in a namespace of its own (the partition scenarios; needs root).
    pub partitions: bool,
    /// HAProxy's health checks on `/readyz` (off: every replica gets its share).
    pub health_checks: bool,
    /// Postgres as a Patroni set with this replication, reached this way (`None`: one
    /// `PgServer`).
    pub pg_ha: Option<(Replication, PgVia)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            replicas: 3,
            topology: Topology::Single,
            redis: String::new(),
            durability: Durability::Postgres,
            redis_args: Vec::new(),
            // Valid with and without the lease heartbeat: lock_ttl > upstream_timeout
            // (without it) and lock_ttl >= 3 x command_timeout (with it).
            lock_ttl: "3s".into(),
            upstream_timeout: "2s".into(),
            idempotency: String::new(),
            postgres: String::new(),
            upstream_env: Vec::new(),
            via_fault_proxy: Vec::new(),
            shutdown_grace: "5s".into(),
            command_timeout: "300ms".into(),
            abort_on_close: false,
            server: String::new(),
            extra: String::new(),
            partitions: false,
            health_checks: true,
            pg_ha: None,
        }
    }
}
