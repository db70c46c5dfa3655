//! Where a pool sends a slot's commands ([`Lanes::route`]): the rounds of vouched
//! claims run only while the claim connections and the `WAIT` connections agree on one
//! server (the round cut short by a switch of server: `postgres::vouched`).

use fred::prelude::ClientLike as _;
use idemgate::config::RedisMode;
use idemgate::testing::store::redis::connect::{build_pool, Resends};
use idemgate::testing::store::redis::lanes::Lanes;
use idemgate_fleet::RedisCluster;

use super::failover::config;
use crate::support::RedisServer;

#[tokio::test]
async fn pools_route_a_slot_alike_only_to_the_same_server() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let lanes = |redis: &RedisServer| {
        let pool = build_pool(&config(redis, 0), 2, Resends::Never).unwrap();
        Lanes::new(pool, false)
    };
    let (one, same, other) = (lanes(&a), lanes(&a), lanes(&b));
    for l in [&one, &same, &other] {
        l.pool().init().await.unwrap();
    }
    let route = one.route(7).expect("connected clients agree");
    assert_eq!(route.port, a.port);
    assert_eq!(same.route(7), Some(route.clone()));
    assert_ne!(other.route(7), Some(route));

    // A cluster: each slot routes to the primary that serves it.
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start_nodes(3, 0))
        .await
        .unwrap();
    let mut cfg = config(&a, 0);
    cfg.mode = RedisMode::Cluster;
    cfg.nodes = cluster.seed_urls();
    let lanes = Lanes::new(build_pool(&cfg, 3, Resends::Allowed).unwrap(), true);
    lanes.pool().init().await.unwrap();
    for slot in [0, 9_000, 16_383] {
        let serving = &cluster.nodes()[cluster.primary_for_slot(slot)];
        assert_eq!(
            lanes.route(slot).map(|s| s.port),
            Some(serving.port),
            "{slot}"
        );
    }
}
