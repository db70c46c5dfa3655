//! The abuse rows: slow readers with a connection burst, HTTP/2 floods and attacks,
//! each against the limits a replica runs with.

use crate::harness::run;
use crate::{abuse, h2_attacks, h2_floods};

#[test]
#[ignore = "chaos: make chaos"]
fn slow_readers_of_a_large_response_and_a_connection_burst() {
    run(
        "abuse: 120 slow readers of a 6 MiB replay, 600-connection burst",
        abuse::slow_readers_and_a_connection_burst,
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_floods_four_attackers() {
    run(
        "abuse: HTTP/2 rapid-reset and stream-count floods, 4 attackers at once, 10 s each",
        |n| h2_floods::floods(n, h2_floods::HEAVY),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_stalled_readers() {
    run(
        "abuse: HTTP/2 stalled readers, 2 connections x 40 replays of 1 MiB, windows never opened",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::StalledReaders),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_declared_bodies() {
    run(
        "abuse: HTTP/2 declared bodies, 100 keyed POSTs declaring 1 MiB, no byte sent",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::DeclaredBodies),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_stream_slots() {
    run(
        "abuse: HTTP/2 stream slots, 2 connections x 100 bodiless keyed POSTs",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::StreamSlots),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_resets_after_the_claim() {
    run(
        "abuse: HTTP/2 resets after the claim, keyed POSTs to a 3 s upstream reset after 5 ms",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::ResetAfterClaim),
    );
}

#[test]
#[ignore = "chaos: make chaos"]
fn http2_attack_idle_connections() {
    run(
        "abuse: HTTP/2 idle connections, 200 that only answer or send PINGs",
        |n| h2_attacks::attack(n, h2_attacks::attackers::Attack::IdleConnections),
    );
}
