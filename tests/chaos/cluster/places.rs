//! Where each part of a scenario's fleet runs: its namespace on the lab's bridge, or
//! loopback ([`Places`]).

use idemgate_fleet::{Host, NetLab};

use super::*;

/// Where each part runs: its namespace on the lab's bridge, or loopback.
#[derive(Clone, Debug)]
pub struct Places {
    /// The data nodes: one (single), six (cluster), or primary and replica (sentinel).
    pub redis: Vec<Host>,
    pub sentinels: Vec<Host>,
    pub gateways: Vec<Host>,
    pub pg: Host,
    /// The Patroni nodes and etcd ([`Options::pg_ha`]).
    pub pg_nodes: Vec<Host>,
    pub etcd: Host,
    pub upstream: Host,
    pub lb: Host,
}

impl Places {
    pub(super) fn new(opts: &Options, lab: Option<&NetLab>) -> Self {
        let place = |name: String| match lab {
            Some(lab) => lab.host(&name).expect("a namespace of the lab"),
            None => Host::loopback(),
        };
        let data = match opts.topology {
            Topology::Single => 1,
            Topology::Cluster => 6,
            Topology::Sentinel => 2,
        };
        let sentinels = if opts.topology == Topology::Sentinel {
            3
        } else {
            0
        };
        Self {
            redis: (0..data).map(|i| place(format!("redis{i}"))).collect(),
            sentinels: (0..sentinels).map(|i| place(format!("sent{i}"))).collect(),
            gateways: (0..opts.replicas)
                .map(|i| place(format!("gw{i}")))
                .collect(),
            pg: place("pg".into()),
            pg_nodes: match opts.pg_ha {
                Some(_) => (0..3).map(|i| place(format!("pg{i}"))).collect(),
                None => Vec::new(),
            },
            etcd: place("etcd".into()),
            upstream: place("upstream".into()),
            lb: place("lb".into()),
        }
    }
}
