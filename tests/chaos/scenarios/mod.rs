//! The scenarios: each starts its own fleet, runs the driver through HAProxy (unless
//! said otherwise), injects its fault mid-run, heals, and hands over to the checker.
//!
//! By the fault's source: the stores ([`stores`]), the replicas ([`replicas`],
//! [`sigstop`]), and the clients and upstreams ([`traffic`]).

use std::sync::Arc;

use crate::checker::Expect;
use crate::cluster::{Durability, Options, Stack};
use crate::driver::{KeyClass, Workload};

mod replicas;
mod sigstop;
mod stores;
mod traffic;

pub use replicas::*;
pub use sigstop::*;
pub use stores::*;
pub use traffic::*;

const EXACTLY_ONCE: Expect = Expect {
    exactly_once: true,
    durable: true,
};

/// Exactly once only with durable claims (`write_through`, `vouched`); durable unless
/// Redis-only.
fn expect_for(d: Durability) -> Expect {
    Expect {
        exactly_once: d.claims_durable(),
        durable: d != Durability::RedisOnly,
    }
}

fn options(d: Durability) -> Options {
    Options {
        durability: d,
        ..Options::default()
    }
}

/// Keys spend 50-250 ms in the upstream, so many leases are live when the fault hits.
fn in_flight_heavy(scenario: &str, stack: &Stack) -> Workload {
    let mut w = Workload::new(scenario, vec![stack.front()]);
    w.shape = Arc::new(|n| (format!("?latency_ms={}", 50 + n % 5 * 50), KeyClass::Normal));
    w
}
