//! The one place that knows how to start and stop the parts of an idemgate fleet on
//! loopback: `redis-server` ([`RedisServer`]), PostgreSQL ([`PgServer`]), the demo
//! upstream ([`Upstream`]), gateway replicas ([`Replica`]) and HAProxy in front
//! ([`HaProxy`], configuration from [`HaproxyConfig`]), a Redis Cluster ([`RedisCluster`]),
//! a Sentinel set ([`SentinelSet`]) and Postgres made highly available by Patroni with
//! etcd ([`PatroniSet`], HAProxy in front from [`haproxy_patroni_config`]).
//!
//! Every part listens on 127.0.0.1, on a free port ([`free_port`]) or a fixed one, or,
//! for the partition scenarios, in a network namespace of its own ([`Host`], made by a
//! [`NetLab`], which also cuts and heals the links between them),
//! writes its log into a directory it is given (or a temporary one it owns), and is
//! killed when dropped. The chaos suite (`tests/chaos/cluster.rs`) and the integration
//! tests (`tests/it/support`) build their fleets from these parts; the next topology
//! (Redis Cluster, Sentinel, TLS) is taught here once.
//!
//! Binaries are passed in (the tests know them from `CARGO_BIN_EXE_*`); the system
//! servers (`redis-server`, `initdb`/`postgres`, `haproxy`, `patroni`, `etcd`) are looked up on the
//! machine, as `make test` and `make up` install them. [`bench`] is the fleet of
//! `make bench` (fixed ports, one part at a time, driven by `loadtest/bench/bench.py`);
//! [`otlp`] receives the spans a gateway exports (the tracing tests, `make up`);
//! [`probe`] reads a running fleet's CPU, memory and statement counts for the A/B
//! examples.

#![forbid(unsafe_code)]

pub mod bench;
mod gateway;
mod haproxy;
pub mod local;
mod net;
mod netlab;
pub mod otlp;
mod patroni;
mod postgres;
pub mod probe;
mod redis;
mod redis_cluster;
mod sentinel;
pub mod serve_postgres;
pub mod serve_redis;

pub use gateway::{Replica, Upstream};
pub use haproxy::{
    render_local as haproxy_local_config, render_patroni as haproxy_patroni_config, Backend,
    BackendProto, HaProxy, HaproxyConfig, PgBackend,
};
pub use net::{free_port, http_status, port_open, wait_addr, wait_port, Host};
pub use netlab::NetLab;
pub use patroni::{
    Etcd, Member, PatroniOptions, PatroniPorts, PatroniSet, Replication,
    DATABASE as PATRONI_DATABASE, TTL as PATRONI_TTL,
};
pub use postgres::{bindir as pg_bindir, postgres_owner, PgServer, PgTls};
pub use redis::{info_field, RedisServer, RedisTls, DURABLE_REDIS};
pub use redis_cluster::RedisCluster;
pub use sentinel::{Sentinel, SentinelSet, SERVICE_NAME as SENTINEL_SERVICE};
