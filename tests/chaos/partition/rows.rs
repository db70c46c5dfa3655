//! The partition scenarios ([`super`]) in every mode they apply to: Redis only,
//! `claims = "redis"`, `claims = "write_through"`, with and without
//! `redis.replica_acks` where Redis has replicas. One of them runs in `cargo test`
//! (so `make test` exercises the namespace harness on every change); `make chaos` runs
//! them all. Each skips, saying why, where network namespaces or nftables are missing.

use crate::cluster::Durability::{Postgres, RedisOnly, WriteThrough};
use crate::harness::rows;
use crate::partition::{self, run};

// ---- fast subset ----

#[test]
fn partition_gateway_cut_from_redis_claims_write_through() {
    run(
        "partition: one gateway cut off from redis [claims=write_through]",
        |n| partition::gateway_cut_from_redis(n, WriteThrough),
    );
}

rows! {
    partition_gateway_cut_from_redis_claims_redis:
        "partition: one gateway cut off from redis [claims=redis]" =>
        |n| partition::gateway_cut_from_redis(n, Postgres);
    partition_gateway_cut_from_redis_redis_only:
        "partition: one gateway cut off from redis [redis-only]" =>
        |n| partition::gateway_cut_from_redis(n, RedisOnly);

    partition_cluster_minority_promoted_claims_redis:
        "partition: cluster primary + gateway in minority, promoted [claims=redis]" =>
        |n| partition::cluster_minority(n, Postgres, false, true);
    partition_cluster_minority_promoted_claims_redis_wait:
        "partition: cluster primary + gateway in minority, promoted [claims=redis, replica_acks=1]" =>
        |n| partition::cluster_minority(n, Postgres, true, true);
    partition_cluster_minority_promoted_write_through:
        "partition: cluster primary + gateway in minority, promoted [claims=write_through]" =>
        |n| partition::cluster_minority(n, WriteThrough, false, true);
    partition_cluster_minority_promoted_write_through_wait:
        "partition: cluster primary + gateway in minority, promoted [claims=write_through, replica_acks=1]" =>
        |n| partition::cluster_minority(n, WriteThrough, true, true);
    partition_cluster_minority_promoted_redis_only:
        "partition: cluster primary + gateway in minority, promoted [redis-only]" =>
        |n| partition::cluster_minority(n, RedisOnly, false, true);
    partition_cluster_minority_promoted_redis_only_wait:
        "partition: cluster primary + gateway in minority, promoted [redis-only, replica_acks=1]" =>
        |n| partition::cluster_minority(n, RedisOnly, true, true);

    partition_cluster_minority_short_claims_redis:
        "partition: cluster primary + gateway in minority, healed before node timeout [claims=redis]" =>
        |n| partition::cluster_minority(n, Postgres, false, false);
    partition_cluster_minority_short_claims_redis_wait:
        "partition: cluster primary + gateway in minority, healed before node timeout [claims=redis, replica_acks=1]" =>
        |n| partition::cluster_minority(n, Postgres, true, false);
    partition_cluster_minority_short_write_through:
        "partition: cluster primary + gateway in minority, healed before node timeout [claims=write_through]" =>
        |n| partition::cluster_minority(n, WriteThrough, false, false);
    partition_cluster_minority_short_write_through_wait:
        "partition: cluster primary + gateway in minority, healed before node timeout [claims=write_through, replica_acks=1]" =>
        |n| partition::cluster_minority(n, WriteThrough, true, false);
    partition_cluster_minority_short_redis_only:
        "partition: cluster primary + gateway in minority, healed before node timeout [redis-only]" =>
        |n| partition::cluster_minority(n, RedisOnly, false, false);
    partition_cluster_minority_short_redis_only_wait:
        "partition: cluster primary + gateway in minority, healed before node timeout [redis-only, replica_acks=1]" =>
        |n| partition::cluster_minority(n, RedisOnly, true, false);

    partition_sentinel_minority_claims_redis:
        "partition: sentinel primary + gateway in minority [claims=redis]" =>
        |n| partition::sentinel_minority(n, Postgres, false);
    partition_sentinel_minority_claims_redis_wait:
        "partition: sentinel primary + gateway in minority [claims=redis, replica_acks=1]" =>
        |n| partition::sentinel_minority(n, Postgres, true);
    partition_sentinel_minority_write_through:
        "partition: sentinel primary + gateway in minority [claims=write_through]" =>
        |n| partition::sentinel_minority(n, WriteThrough, false);
    partition_sentinel_minority_write_through_wait:
        "partition: sentinel primary + gateway in minority [claims=write_through, replica_acks=1]" =>
        |n| partition::sentinel_minority(n, WriteThrough, true);
    partition_sentinel_minority_redis_only:
        "partition: sentinel primary + gateway in minority [redis-only]" =>
        |n| partition::sentinel_minority(n, RedisOnly, false);
    partition_sentinel_minority_redis_only_wait:
        "partition: sentinel primary + gateway in minority [redis-only, replica_acks=1]" =>
        |n| partition::sentinel_minority(n, RedisOnly, true);

    partition_postgres_cut_claims_redis:
        "partition: postgres cut off from one gateway [claims=redis]" =>
        |n| partition::postgres_cut(n, Postgres);
    partition_postgres_cut_write_through:
        "partition: postgres cut off from one gateway [claims=write_through]" =>
        |n| partition::postgres_cut(n, WriteThrough);

    partition_redis_replies_lost_claims_redis:
        "partition: redis replies to one gateway lost [claims=redis]" =>
        |n| partition::redis_replies_lost(n, Postgres);
    partition_redis_replies_lost_write_through:
        "partition: redis replies to one gateway lost [claims=write_through]" =>
        |n| partition::redis_replies_lost(n, WriteThrough);
    partition_redis_replies_lost_redis_only:
        "partition: redis replies to one gateway lost [redis-only]" =>
        |n| partition::redis_replies_lost(n, RedisOnly);
}
