//! The rolling upgrade going on to `postgres.claims = "vouched"`, as CHANGELOG's upgrade
//! step says: first this release on every replica (write-through claims beside the
//! previous release), then vouched claims switched on replica by replica, on a Redis run
//! as the mode relies on (AOF fsync'd before every reply, no eviction). At every step:
//! replays across the two replicas, concurrent duplicates through HAProxy run once and
//! are woken on either replica, and once a replica runs vouched claims it keeps them in
//! Redis alone. Part of `make upgrade-check` (`#[ignore]`d in a plain `cargo test`).

use super::upgrade::{bursts_run_once, previous_binary, replays_across, switch_steps, Fleet};
use crate::support::{MockUpstream, PgServer, RedisServer};

/// `[postgres]` lines: vouched claims.
const VOUCHED: &str = "claims = \"vouched\"";

/// `idemgate_claim_vouch_total{verdict="kept"}` on a replica's admin listener.
async fn kept_alone(admin: &str) -> f64 {
    let text = reqwest::get(format!("{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    crate::support::metric(&text, "idemgate_claim_vouch_total{verdict=\"kept\"}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn the_switch_to_vouched_claims_rolls_through_a_mixed_fleet() {
    let redis = RedisServer::start_with(idemgate_fleet::DURABLE_REDIS);
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let previous = previous_binary();
    let steps = switch_steps(&previous, VOUCHED);
    for (step, bins) in &steps {
        let fleet = Fleet::start(&redis, &pg, &upstream, bins).await;
        let before = upstream.executions();
        replays_across(&fleet, &format!("{step}-cross"), 4).await;
        bursts_run_once(&fleet, &upstream, &format!("{step}-burst")).await;
        assert_eq!(
            upstream.executions() - before,
            2 * 2 * 4 + 12,
            "{step}: one execution per (tenant, key)"
        );
        for (bin, replica) in bins.iter().zip(&fleet.replicas) {
            let kept = kept_alone(&replica.admin_url()).await;
            assert_eq!(
                kept > 0.0,
                bin.2 == VOUCHED,
                "{step}: claims kept by redis alone on {} ({kept})",
                replica.url()
            );
        }
    }
}
