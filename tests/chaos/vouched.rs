//! `claims = "vouched"` under the faults the durable mode must survive, every Redis
//! server run as the mode relies on (AOF fsync'd before every reply, no eviction): a
//! Redis restarted with and without its data, a Redis paused, a Cluster primary and a
//! Sentinel primary lost, a gateway replica killed or frozen past its leases (Redis
//! remembers a lapsed lease, as Postgres' row does), partitions of both claim paths (Redis kept, Postgres written
//! through where Redis cannot vouch), Postgres lost and switched over; and a fleet
//! half-way through a switch to the mode (`Durability::Mixed`: one replica still writes
//! claims through) under the faults where the modes differ. Each row expects exactly
//! once and nothing lost (`Durability::claims_durable`). `make chaos` runs them.

use idemgate_fleet::Replication::Sync;

use crate::cluster::Durability::{Mixed, Vouched};
use crate::harness::rows;
use crate::pg_ha::PgFault::{HostLoss, Switchover};
use crate::{failover, partition, pg_ha, scenarios};

rows! {
    vouched_redis_restarted_data_lost:
        "redis restarted, data lost [claims=vouched]" =>
        |n| scenarios::redis_restart(n, Vouched);
    vouched_redis_down_back_with_its_data:
        "redis down 3 s, back with its AOF [claims=vouched]" =>
        |n| scenarios::redis_down(n, Vouched);
    vouched_redis_paused:
        "redis paused past the command timeout [claims=vouched]" =>
        |n| scenarios::redis_pause(n, Vouched);
    vouched_cluster_primary_killed:
        "cluster primary SIGKILLed [claims=vouched]" =>
        |n| failover::cluster_primary_killed(n, Vouched, false);
    vouched_sentinel_failover:
        "sentinel failover, primary SIGKILLed [claims=vouched]" =>
        |n| failover::sentinel_failover(n, Vouched, false);
    vouched_partition_gateway_cut_from_redis:
        "partition: one gateway cut off from redis [claims=vouched]" =>
        |n| partition::gateway_cut_from_redis(n, Vouched);
    vouched_partition_cluster_minority_promoted:
        "partition: cluster primary + gateway in minority, promoted [claims=vouched]" =>
        |n| partition::cluster_minority(n, Vouched, false, true);
    vouched_partition_cluster_minority_healed:
        "partition: cluster primary + gateway in minority, healed before promotion [claims=vouched]" =>
        |n| partition::cluster_minority(n, Vouched, false, false);
    vouched_partition_sentinel_minority:
        "partition: sentinel primary + gateway in minority [claims=vouched]" =>
        |n| partition::sentinel_minority(n, Vouched, false);
    vouched_partition_postgres_cut:
        "partition: postgres cut off from every gateway [claims=vouched]" =>
        |n| partition::postgres_cut(n, Vouched);
    vouched_partition_redis_replies_lost:
        "partition: redis replies lost [claims=vouched]" =>
        |n| partition::redis_replies_lost(n, Vouched);
    vouched_patroni_primary_lost:
        "patroni primary lost, synchronous [claims=vouched]" =>
        |n| pg_ha::row(n, Vouched, Sync, HostLoss);
    vouched_replica_killed_holding_leases:
        "replica SIGKILLed holding leases [claims=vouched]" =>
        |n| scenarios::replica_sigkill(n, Vouched);
    vouched_replica_frozen_past_its_lease:
        "replica SIGSTOPped past its lease, resumed [claims=vouched]" =>
        |n| scenarios::replica_sigstop(n, Vouched);
    vouched_patroni_switchover:
        "patroni switchover, synchronous [claims=vouched]" =>
        |n| pg_ha::row(n, Vouched, Sync, Switchover);
    vouched_mixed_redis_restarted_data_lost:
        "redis restarted, data lost [claims=vouched, one replica write_through]" =>
        |n| scenarios::redis_restart(n, Mixed);
    vouched_mixed_partition_write_through_gateway_cut_from_redis:
        "partition: the write_through gateway cut off from redis [claims=vouched, one replica write_through]" =>
        |n| partition::gateway_cut_from_redis(n, Mixed);
    vouched_mixed_replica_killed_holding_leases:
        "replica SIGKILLed holding leases [claims=vouched, one replica write_through]" =>
        |n| scenarios::replica_sigkill(n, Mixed);
}
