//! The rows of the clients' and upstreams' faults: slow and resetting upstreams, a hot
//! key with waiters, clients that give up on the claim path.

use crate::harness::run;
use crate::{claim_faults, scenarios, slow_upstream};

#[test]
#[ignore = "chaos: make chaos"]
fn upstream_slow_past_the_lease() {
    run("upstream slower than the lease", scenarios::upstream_slow);
}

#[test]
#[ignore = "chaos: make chaos"]
fn slow_upstream_answering_3x_past_upstream_timeout() {
    run(
        "slow upstream: answers 3x past upstream_timeout, clients retry on 504 and 409",
        slow_upstream::slow_upstream,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn upstream_resetting_after_acting_release() {
    run("upstream resets after acting [on_ambiguous=release]", |n| {
        scenarios::upstream_reset(n, "release")
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn upstream_resetting_after_acting_store() {
    run("upstream resets after acting [on_ambiguous=store]", |n| {
        scenarios::upstream_reset(n, "store")
    });
}

#[test]
#[ignore = "chaos: make chaos"]
fn hot_key_1000_concurrent_identical_requests_waiting() {
    run(
        "1000 concurrent identical requests, one key [in_flight=wait]",
        |n| scenarios::hot_key(n, true),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn clients_timing_out_during_a_slow_claim() {
    run(
        "clients time out during a slow claim, then retry [redis-only]",
        claim_faults::slow_claim_timeouts,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn impatient_waiters_on_hot_keys() {
    run(
        "impatient waiters on hot keys [in_flight=wait]",
        claim_faults::impatient_waiters,
    );
}
