//! The Postgres high-availability rows ([`super`]): {primary lost, switchover,
//! primary partitioned} x {`claims = "write_through"`, `claims = "redis"`} x
//! {synchronous, asynchronous replication}, and the primary powered off (its packets
//! dropped, never healed; first in the URL). One runs in `cargo test` (so `make test`
//! keeps a Patroni failover); `make chaos` runs them all. The partition and power-off
//! rows skip, saying why, where network namespaces or nftables are missing.

use idemgate_fleet::Replication::{Async, Sync};

use crate::cluster::Durability::{Postgres, WriteThrough};
use crate::cluster::PgVia::{Haproxy, MultiHostPrimaryFirst};
use std::time::Duration;

use crate::harness::{rows, run_within};
use crate::pg_ha::PgFault::Switchover;
use crate::pg_ha::{row, row_via, PgFault::HostLoss, PgFault::Partition, PgFault::PowerOff};

// ---- fast subset ----

/// Bounded to 60 s (it takes about 30: the set's bootstrap, 7 s of load, the failover
/// within the leader key's TTL, the passes after it).
#[test]
fn patroni_primary_lost_sync_write_through() {
    run_within(
        "patroni: primary lost, failover [sync, claims=write_through]",
        Duration::from_secs(60),
        |n| row(n, WriteThrough, Sync, HostLoss),
    );
}

rows! {
    patroni_primary_lost_sync_claims_redis:
        "patroni: primary lost, failover [sync, claims=redis]" =>
        |n| row(n, Postgres, Sync, HostLoss);
    patroni_primary_lost_async_write_through:
        "patroni: primary lost, failover [async, claims=write_through]" =>
        |n| row(n, WriteThrough, Async, HostLoss);
    patroni_primary_lost_async_claims_redis:
        "patroni: primary lost, failover [async, claims=redis]" =>
        |n| row(n, Postgres, Async, HostLoss);

    patroni_primary_lost_via_haproxy_sync_write_through:
        "patroni: primary lost, failover, via HAProxy [sync, claims=write_through]" =>
        |n| row_via(n, WriteThrough, Sync, HostLoss, Haproxy);
    patroni_switchover_via_haproxy_sync_write_through:
        "patroni: switchover, via HAProxy [sync, claims=write_through]" =>
        |n| row_via(n, WriteThrough, Sync, Switchover, Haproxy);

    patroni_switchover_sync_write_through:
        "patroni: switchover [sync, claims=write_through]" =>
        |n| row(n, WriteThrough, Sync, Switchover);
    patroni_switchover_sync_claims_redis:
        "patroni: switchover [sync, claims=redis]" =>
        |n| row(n, Postgres, Sync, Switchover);
    patroni_switchover_async_write_through:
        "patroni: switchover [async, claims=write_through]" =>
        |n| row(n, WriteThrough, Async, Switchover);
    patroni_switchover_async_claims_redis:
        "patroni: switchover [async, claims=redis]" =>
        |n| row(n, Postgres, Async, Switchover);

    patroni_primary_partitioned_sync_write_through:
        "patroni: primary partitioned from etcd and the fleet [sync, claims=write_through]" =>
        |n| row(n, WriteThrough, Sync, Partition);
    patroni_primary_partitioned_sync_claims_redis:
        "patroni: primary partitioned from etcd and the fleet [sync, claims=redis]" =>
        |n| row(n, Postgres, Sync, Partition);
    patroni_primary_partitioned_async_write_through:
        "patroni: primary partitioned from etcd and the fleet [async, claims=write_through]" =>
        |n| row(n, WriteThrough, Async, Partition);
    patroni_primary_partitioned_async_claims_redis:
        "patroni: primary partitioned from etcd and the fleet [async, claims=redis]" =>
        |n| row(n, Postgres, Async, Partition);

    patroni_primary_powered_off_sync_write_through:
        "patroni: primary powered off (packets dropped, not healed), first in the URL [sync, claims=write_through]" =>
        |n| row_via(n, WriteThrough, Sync, PowerOff, MultiHostPrimaryFirst);
}
