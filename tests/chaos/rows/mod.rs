//! The slow rows (`make chaos`) of the scenarios that do not register their own (as
//! `lifecycle/`, `partition/`, `pg_ha/` and `vouched` do), one file per fault source:
//! the stores, the replicas, the clients and upstreams, abuse, Redis failovers.
//!
//! The fast subset (`cargo test`) stays in `main.rs`. Rows with
//! `postgres.redis_fill = "on_replay"` are listed last in their file: Postgres decides,
//! as with write-through claims, so they must show no duplicate and nothing lost either.

mod abuse;
mod failover;
mod replicas;
mod stores;
mod traffic;
