//! Which client of a pool carries a record's commands: in a cluster, the pool's clients
//! are split between the shards ("lanes"), so that a primary that stops answering
//! stalls its own shard only.
//!
//! Why: a fred client has one router task for all its connections. When one of them
//! hangs (a primary behind a network partition, or paused), fred drops it and
//! reconnects the client *as a whole*, re-reading the slot map and connecting to every
//! primary in it, the unreachable one included, until the cluster has promoted its
//! replica; meanwhile every command queued on that client waits, whatever its shard
//! (up to ~2 s of 503s for keys of healthy shards in Redis-only mode). With
//! lanes, only the clients of the unreachable primary's shard ever send to it, so only
//! they reconnect; the other shards' clients never notice.
//!
//! The lanes follow fred's own slot map (re-read whenever a client reconnects or sees
//! the cluster change): primaries ordered by their lowest slot, shard `s` of `S` gets
//! the clients `c` with `c % S == s` when the pool has at least `S` clients, else
//! client `s % C` (shards then share). A lane is only a choice of client: fred still
//! routes each command by its slot (and follows `MOVED`), so a stale lane map costs
//! isolation, never correctness. Outside cluster mode, and before the slot map is
//! known, every client serves every slot, round robin, as a plain pool does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use fred::interfaces::{ClusterInterface as _, EventInterface as _};
use fred::prelude::{Client, ClientLike, Pool, Server};

use super::slots::SLOTS;

/// A pool and, in cluster mode, the clients of each shard. Cheap to share (`Arc`).
pub struct Lanes {
    pool: Pool,
    cluster: bool,
    map: Arc<RwLock<LaneMap>>,
    next: AtomicUsize,
}

/// For each slot its lane, and the clients (indices into the pool) of each lane.
#[derive(Debug, PartialEq, Eq)]
struct LaneMap {
    /// Lane of each slot; empty when the slot map is not known (every client serves).
    lane_of_slot: Vec<u16>,
    lanes: Vec<Vec<usize>>,
}

impl LaneMap {
    fn unknown() -> Self {
        Self {
            lane_of_slot: Vec::new(),
            lanes: Vec::new(),
        }
    }

    /// Lanes for `primaries` (each with its slot ranges, in any order) and `clients`
    /// clients.
    fn build(mut primaries: Vec<Vec<(u16, u16)>>, clients: usize) -> Self {
        primaries.retain(|ranges| !ranges.is_empty());
        if primaries.is_empty() || clients == 0 {
            return Self::unknown();
        }
        primaries.sort_by_key(|ranges| ranges.iter().map(|r| r.0).min());
        let shards = primaries.len();
        let lanes: Vec<Vec<usize>> = (0..shards)
            .map(|s| {
                if shards <= clients {
                    (0..clients).filter(|c| c % shards == s).collect()
                } else {
                    vec![s % clients]
                }
            })
            .collect();
        // Slots no range covers (a cluster being set up) go to lane 0: any client
        // routes them correctly.
        let mut lane_of_slot = vec![0u16; SLOTS];
        for (lane, ranges) in primaries.iter().enumerate() {
            for &(start, end) in ranges {
                for slot in start..=end.min(SLOTS as u16 - 1) {
                    lane_of_slot[usize::from(slot)] = lane as u16;
                }
            }
        }
        Self {
            lane_of_slot,
            lanes,
        }
    }
}

impl Lanes {
    /// Lanes over `pool`; `cluster`: split by shard, else every client serves all.
    /// In cluster mode, the lane map is re-read whenever a client of the pool
    /// reconnects or sees the cluster change (one task per client, until it closes).
    pub fn new(pool: Pool, cluster: bool) -> Self {
        let lanes = Self {
            pool,
            cluster,
            map: Arc::new(RwLock::new(LaneMap::unknown())),
            next: AtomicUsize::new(0),
        };
        if cluster {
            let (pool, map) = (lanes.pool.clone(), lanes.map.clone());
            on_events(&lanes.pool, move |_| refresh(&pool, &map));
        }
        lanes
    }

    /// Re-reads the lane map from fred's slot map now (after connecting).
    pub fn refresh(&self) {
        if self.cluster {
            refresh(&self.pool, &self.map);
        }
    }

    /// The server the pool sends commands of `slot` to now, if its clients agree
    /// ([`route`]).
    pub fn route(&self, slot: u16) -> Option<Server> {
        route(&self.pool, slot, self.cluster)
    }

    /// The pool behind the lanes.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A client for a command of `slot`: round robin over the slot's lane, preferring a
    /// connected client (a reconnecting one queues the command until it is back).
    pub fn for_slot(&self, slot: u16) -> &Client {
        if !self.cluster {
            return self.pool.next_connected();
        }
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let Some(&lane) = map.lane_of_slot.get(usize::from(slot)) else {
            return self.pool.next_connected();
        };
        let clients = self.pool.clients();
        let lane = &map.lanes[usize::from(lane)];
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let pick = |n: usize| &clients[lane[(start + n) % lane.len()]];
        (0..lane.len())
            .map(pick)
            .find(|c| c.is_connected())
            .unwrap_or_else(|| pick(0))
    }

    /// A client for a command of `key` (see [`Self::for_slot`]).
    pub fn for_key(&self, key: &str) -> &Client {
        if !self.cluster {
            return self.pool.next_connected();
        }
        self.for_slot(super::slots::slot(key))
    }
}

/// Where each client of `pool` sends a command of `slot` now: in a cluster, the primary
/// its slot map names; otherwise the server it is connected to. A client that is
/// reconnecting names none (its next connection is an event: [`on_events`]).
pub(super) fn destinations(
    pool: &Pool,
    slot: u16,
    cluster: bool,
) -> impl Iterator<Item = Server> + '_ {
    pool.clients().iter().flat_map(move |client| match cluster {
        true => (client.cached_cluster_state())
            .and_then(|r| r.get_server(slot).cloned())
            .into_iter()
            .collect(),
        false => client.active_connections(),
    })
}

/// The server every client of `pool` sends a command of `slot` to now
/// ([`destinations`]); `None` when two clients disagree, or none knows (all
/// reconnecting).
pub(super) fn route(pool: &Pool, slot: u16, cluster: bool) -> Option<Server> {
    let mut servers = destinations(pool, slot, cluster);
    let first = servers.next()?;
    servers.all(|s| s == first).then_some(first)
}

/// The primaries of the first client of `pool` that knows the cluster's slot map (one
/// reconnecting may not), each with its slot ranges, in fred's order; empty outside
/// cluster mode or before the map is known. What [`Lanes`] and
/// [`super::RedisStore::shards`] both split the slots by.
pub(super) fn primaries(pool: &Pool) -> Vec<(String, Vec<(u16, u16)>)> {
    let routing = (pool.clients().iter())
        .filter_map(|c| c.cached_cluster_state())
        .find(|r| !r.slots().is_empty());
    let mut primaries: Vec<(String, Vec<(u16, u16)>)> = Vec::new();
    for range in routing.iter().flat_map(|r| r.slots()) {
        let name = format!("{}:{}", range.primary.host, range.primary.port);
        match primaries.iter_mut().find(|(n, _)| *n == name) {
            Some((_, ranges)) => ranges.push((range.start, range.end)),
            None => primaries.push((name, vec![(range.start, range.end)])),
        }
    }
    primaries
}

/// Calls `changed` whenever a client of `pool` (re)connects or sees the cluster change,
/// with what happened; one task per client, until it closes.
pub(super) fn on_events(pool: &Pool, changed: impl Fn(&'static str) + Send + Sync + 'static) {
    let changed = Arc::new(changed);
    for client in pool.clients() {
        let (mut reconnects, mut changes) = (client.reconnect_rx(), client.cluster_change_rx());
        let changed = changed.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let what = tokio::select! {
                    r = reconnects.recv() => r.map(|_| "reconnected"),
                    r = changes.recv() => r.map(|_| "cluster changed"),
                };
                match what {
                    Ok(what) => changed(what),
                    Err(RecvError::Lagged(_)) => changed("events missed"),
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }
}

/// Rebuilds `map` from the slot map of the first client of `pool` that knows one.
fn refresh(pool: &Pool, map: &RwLock<LaneMap>) {
    let primaries = primaries(pool);
    if primaries.is_empty() {
        return;
    }
    let built = LaneMap::build(primaries.into_iter().map(|(_, r)| r).collect(), pool.size());
    let mut current = map.write().unwrap_or_else(|e| e.into_inner());
    if *current != built {
        if built.lanes.len() > pool.size() {
            tracing::warn!(
                primaries = built.lanes.len(),
                clients = pool.size(),
                "fewer redis clients than cluster primaries: shards share clients, and a \
                 primary that stops answering delays the keys of the shards sharing its \
                 clients; set redis.pool_size to at least the number of primaries"
            );
        }
        *current = built;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Vec<Vec<(u16, u16)>> {
        vec![vec![(10923, 16383)], vec![(0, 5460)], vec![(5461, 10922)]]
    }

    #[test]
    fn shards_get_disjoint_clients_when_the_pool_is_large_enough() {
        let map = LaneMap::build(three(), 4);
        assert_eq!(map.lanes, vec![vec![0, 3], vec![1], vec![2]]);
        assert_eq!(map.lane_of_slot[0], 0, "ordered by lowest slot");
        assert_eq!(map.lane_of_slot[5461], 1);
        assert_eq!(map.lane_of_slot[16383], 2);
    }

    #[test]
    fn more_shards_than_clients_share_clients() {
        let map = LaneMap::build(three(), 2);
        assert_eq!(map.lanes, vec![vec![0], vec![1], vec![0]]);
    }

    #[test]
    fn a_primary_with_several_ranges_is_one_lane() {
        let map = LaneMap::build(vec![vec![(0, 99), (200, 16383)], vec![(100, 199)]], 2);
        assert_eq!(map.lanes.len(), 2);
        assert_eq!(map.lane_of_slot[150], 1);
        assert_eq!(map.lane_of_slot[300], 0);
    }

    #[test]
    fn no_slot_map_means_every_client_serves() {
        let map = LaneMap::build(Vec::new(), 4);
        assert!(map.lane_of_slot.is_empty());
    }
}
