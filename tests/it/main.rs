//! Integration tests: the gateway in-process against real `redis-server` processes and
//! a counting mock upstream. One test binary, many modules, so they link once.

mod support;

mod admin_race;
mod body_limits;
mod cache;
mod claim_edges;
mod cli;
mod cluster_waiters;
mod concurrency;
mod durability;
mod encoded_once;
mod encryption;
mod failover;
mod faults;
mod forwarding;
mod keys;
mod lease;
mod limits;
mod observability;
mod outage;
mod owned_headers;
mod partitions;
mod paths;
mod pg_claims;
mod pg_ops;
mod pg_timeouts;
mod pg_writer;
mod replay;
mod resharding;
mod secrets;
mod sentinel_partition;
mod settle;
mod settle_lease;
mod shard_warmth;
mod tenancy;
mod thread_per_core;
mod tier_edges;
mod tls_postgres;
mod tls_redis;
mod tls_upstream;
mod topologies;
mod upgrade;
mod upstream_failures;
mod wakeups;
mod write_timeout;
