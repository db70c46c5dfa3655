//! The rolling upgrade to vouched claims, on a Redis run as the mode relies on (AOF
//! fsync'd before every reply, no eviction), both ways CHANGELOG's upgrade step allows:
//! onto this release's defaults (vouched claims, looked up when cold) straight beside the
//! previous release, whose default writes claims through and which reads the epoch
//! markers; and, for a fleet that pinned `claims = "write_through"`, switched replica by
//! replica. At every step: replays across the two replicas, concurrent duplicates
//! through HAProxy run once and are woken on either replica, and a replica keeps claims
//! in Redis alone exactly when it runs vouched claims. Part of `make upgrade-check`
//! (`#[ignore]`d in a plain `cargo test`).

use std::path::Path;

use super::upgrade::{
    bursts_run_once, previous_binary, replays_across, switch_steps, Fleet, Spec, CURRENT,
};
use crate::support::{MockUpstream, PgServer, RedisServer};

/// `[postgres]` lines: vouched claims.
const VOUCHED: &str = "claims = \"vouched\"";
/// `[postgres]` lines: vouched claims filled at completion, as a fleet that ran vouched
/// claims on the previous release pins them while it upgrades (CHANGELOG.md).
const VOUCHED_AT_COMPLETION: &str = "claims = \"vouched\"\nredis_fill = \"at_completion\"";

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

/// Whether a replica runs vouched claims: asked for, or this release on its defaults.
fn vouches(spec: &Spec<'_>) -> bool {
    spec.2.starts_with(VOUCHED) || (spec.0 == Path::new(CURRENT) && spec.2.is_empty())
}

/// Runs each step's fleet on one durable Redis and one Postgres and checks it.
async fn roll(steps: &[(&str, [Spec<'_>; 2])]) {
    let redis = RedisServer::start_with(idemgate_fleet::DURABLE_REDIS);
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    for (step, bins) in steps {
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
                vouches(bin),
                "{step}: claims kept by redis alone on {} ({kept})",
                replica.url()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn the_new_default_rolls_in_beside_the_previous_release() {
    let previous = previous_binary();
    let current = Path::new(CURRENT);
    roll(&[
        ("defaults", [(&previous, "", ""), (current, "", "")]),
        ("upgraded", [(current, "", ""), (current, "", "")]),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn the_switch_to_vouched_claims_rolls_through_a_mixed_fleet() {
    let previous = previous_binary();
    roll(&switch_steps(&previous, VOUCHED)).await;
}

/// A fleet that ran vouched claims on the previous release (opt-in there) upgrades as
/// CHANGELOG.md says: this release beside it filling at completion (a replica of the
/// previous release takes a lease that ran out over without asking Postgres, so none
/// may be left by a completion in Postgres alone), then, once every replica runs this
/// release, onto the default (filled on replay) replica by replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-check"]
async fn a_vouched_fleet_rolls_in_filling_at_completion_then_on_replay() {
    let previous = previous_binary();
    let current = Path::new(CURRENT);
    roll(&[
        (
            "versions",
            [
                (&previous, "", VOUCHED),
                (current, "", VOUCHED_AT_COMPLETION),
            ],
        ),
        (
            "settings",
            [(current, "", VOUCHED_AT_COMPLETION), (current, "", "")],
        ),
        ("defaults", [(current, "", ""), (current, "", "")]),
    ])
    .await;
}
