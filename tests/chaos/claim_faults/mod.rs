//! Callers that give up on the claim path: a claim that the
//! client abandons while Redis is slow must not strand its lease, and duplicates that
//! hang up while waiting for the holder must leave the key's waiters.
//!
//! Both scenarios run HAProxy with `option abortonclose`, so that a client hanging up
//! on the front aborts its request on the replica too, and also send to the replicas
//! directly: the gateway sees every hang-up.

mod slow_claims;
mod waiters;

use std::sync::Arc;

use crate::checker::Expect;
use crate::driver::{Exchange, Got, KeyClass, Plan, Recorder, Req};

pub use slow_claims::slow_claim_timeouts;
pub use waiters::impatient_waiters;

const EXACTLY_ONCE: Expect = Expect {
    exactly_once: true,
    durable: true,
};

fn slug(name: &str) -> String {
    name.replace(['[', ']', '=', ' ', ','], "_")
}

fn keyed(name: &str, what: &str, i: usize, latency_ms: u64) -> Arc<Req> {
    Arc::new(Req {
        tenant: i % 3,
        key: format!("{}-{what}-{i}-t{}", slug(name), i % 3),
        path: format!("/v1/payments?latency_ms={latency_ms}"),
        body: format!("{{\"amount\":{i},\"currency\":\"eur\"}}"),
    })
}

fn plan_of(reqs: &[Arc<Req>]) -> Vec<Plan> {
    reqs.iter()
        .map(|r| Plan {
            key: r.key.clone(),
            class: KeyClass::Normal,
            reqs: vec![r.clone()],
        })
        .collect()
}

fn ms(rec: &Recorder) -> u64 {
    rec.start.elapsed().as_millis() as u64
}

fn is_409(e: &Exchange) -> bool {
    matches!(&e.got, Got::Resp(r) if r.status == 409)
}
