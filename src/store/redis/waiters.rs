//! Waiting duplicates (`in_flight = "wait"`) and replay-cache invalidations over Redis
//! pub/sub, fanned out to the local requests waiting on a record. The completion and
//! release scripts publish on the record's channel (`<record key>:done`) when a claim
//! answered "in flight" for the record (`lua/claim.lua` marks it in that same step, and
//! a waiter is subscribed before it claims, so it hears every completion after its
//! claim and its claim sees every one before). A waiter re-checks its key once a
//! [`RECHECK`] besides (`store::tiers::wait`), which a missed wake-up costs.
//!
//! - Standalone and Sentinel: one pattern subscription per replica to every record's
//!   channel (on the primary the sentinels name; re-made after a failover).
//! - Cluster: the scripts `SPUBLISH` (sharded pub/sub: the channel has the record's hash
//!   tag, so the message stays on the shard of the record instead of going to every
//!   node). Sharded pub/sub has no patterns, so a replica `SSUBSCRIBE`s to the channel
//!   of each record it has a waiter for, when the first local waiter arrives (before its
//!   first re-claim, so no wake-up is missed), and `SUNSUBSCRIBE`s when the last one
//!   leaves, a caller hanging up included ([`Watch`]'s drop). Subscription changes run
//!   one at a time, so a late unsubscribe cannot undo a newer waiter's subscribe.
//! - Admin invalidations go on one classic channel, `<prefix>:invalidated` (the record
//!   key as message), which every replica subscribes to; a cluster delivers classic
//!   pub/sub messages to subscribers on every node.
//!
//! A subscription that cannot be made (Redis down) is not an error: the waiter still
//! re-claims when the holder's lease runs out.
//!
//! Resharding: when a node loses a slot, Redis drops the sharded subscriptions of that
//! slot's channels (fred discards the unsolicited `SUNSUBSCRIBE` and does not follow),
//! and the completion is then published on the new owner. So in cluster mode a waiter
//! that heard nothing for [`RECHECK`] re-`SSUBSCRIBE`s ([`Watch::refresh`]: fred
//! follows the `MOVED` to the slot's new owner) and then re-checks the record: a
//! wake-up lost to a slot move costs at most [`RECHECK`], not the `wait_timeout`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::clients::SubscriberClient;
use fred::prelude::{Builder, ClientLike, EventInterface, PubsubInterface, ReconnectPolicy};
use fred::types::Message;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::Notify;

use crate::config::RedisConfig;
use crate::idempotency::RecordId;
use crate::store::memory::ReplayCache;

/// Cluster mode: how long a waiter waits for a wake-up before it re-subscribes and
/// re-checks its record (one `SSUBSCRIBE` per channel and one claim per waiter).
pub const RECHECK: Duration = Duration::from_secs(1);

/// Local waiters by channel, woken by the subscription.
pub struct Waiters {
    local: Mutex<HashMap<String, Arc<Notify>>>,
    /// Cluster mode: the per-record sharded subscriptions.
    sharded: Option<Sharded>,
    /// The admin invalidations' channel.
    invalidations: String,
}

/// The sharded channels subscribed to; the lock is held while one changes.
struct Sharded {
    client: SubscriberClient,
    /// Each channel with when it was last (re)subscribed.
    subscribed: tokio::sync::Mutex<HashMap<String, Instant>>,
    timeout: Duration,
}

impl Sharded {
    /// `SSUBSCRIBE channel` (routed to its slot's primary); recorded if it worked.
    async fn subscribe(&self, subscribed: &mut HashMap<String, Instant>, channel: &str) {
        let ch = channel.to_string();
        match tokio::time::timeout(self.timeout, self.client.ssubscribe(ch)).await {
            Ok(Ok(())) => {
                subscribed.insert(channel.to_string(), Instant::now());
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "could not subscribe to a record's channel")
            }
            Err(_) => tracing::debug!("subscribing to a record's channel timed out"),
        }
    }
}

/// Where and how [`Waiters::start`] subscribes.
pub struct Channels {
    /// The pattern of every record channel (standalone and Sentinel).
    pub pattern: String,
    /// The admin invalidations' channel.
    pub invalidations: String,
    /// Cluster mode: per-record sharded subscriptions instead of the pattern.
    pub sharded: bool,
}

/// A registration on one channel; the entry goes away with its last guard.
pub struct Watch {
    waiters: Arc<Waiters>,
    channel: String,
    notify: Arc<Notify>,
}

impl Watch {
    /// The wake-up of this channel. Create (and enable) it before checking the state,
    /// so a completion between the check and the wait is not missed.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }

    /// The wake-up, shared: for a waiter that borrows itself mutably while it waits.
    pub fn notify_handle(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Cluster mode: subscribes again to this channel, on the node that serves its slot
    /// now (the old owner dropped it if the slot moved). Once per channel per
    /// [`RECHECK`], however many local waiters ask.
    pub async fn refresh(&self) {
        if let Some(sharded) = &self.waiters.sharded {
            let mut subscribed = sharded.subscribed.lock().await;
            let fresh =
                (subscribed.get(&self.channel)).is_some_and(|at| at.elapsed() < RECHECK / 2);
            if !fresh {
                sharded.subscribe(&mut subscribed, &self.channel).await;
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut local = self.waiters.local.lock().unwrap_or_else(|p| p.into_inner());
        // Ours plus the map's: nobody else waits here any more.
        if Arc::strong_count(&self.notify) > 2 {
            return;
        }
        local.remove(&self.channel);
        drop(local);
        if self.waiters.sharded.is_none() {
            return;
        }
        let (waiters, channel) = (self.waiters.clone(), std::mem::take(&mut self.channel));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { waiters.unsubscribe(channel).await });
        }
    }
}

/// The record a channel (`<prefix>:{<record hex>}:done`) is about.
fn record_of(channel: &str) -> Option<RecordId> {
    let hex = channel.split_once('{')?.1.split_once('}')?.0;
    RecordId::from_hex(hex)
}

impl Waiters {
    /// Starts the subscriber (it reconnects and resubscribes by itself).
    /// `cache` loses the records that an admin invalidation names.
    pub fn start(
        config: &RedisConfig,
        channels: Channels,
        cache: Option<Arc<ReplayCache>>,
    ) -> Result<Arc<Self>, fred::error::Error> {
        let fred_config = super::connect::fred_config(config)?;
        let subscriber: SubscriberClient = Builder::from_config(fred_config)
            .with_performance_config(|p| p.broadcast_channel_capacity = 4096)
            .with_connection_config(|c| c.connection_timeout = config.connect_timeout)
            .set_policy(ReconnectPolicy::new_constant(0, 100))
            .build_subscriber_client()?;
        let sharded = channels.sharded.then(|| Sharded {
            client: subscriber.clone(),
            subscribed: tokio::sync::Mutex::new(HashMap::new()),
            timeout: config.command_timeout,
        });
        let waiters = Arc::new(Self {
            local: Mutex::new(HashMap::new()),
            sharded,
            invalidations: channels.invalidations.clone(),
        });
        fan_out(waiters.clone(), subscriber.message_rx(), cache.clone());
        // While the subscription was down, invalidations went unheard: after every
        // (re)connection, the replay cache starts empty, and waiters re-check.
        forget_on_reconnect(waiters.clone(), subscriber.reconnect_rx(), cache);
        subscriber.connect();
        let _resubscribe = subscriber.manage_subscriptions();
        subscribe(subscriber, channels);
        Ok(waiters)
    }

    /// Registers interest in `channel`; in cluster mode, returns once the replica is
    /// subscribed to it (or the subscription failed: the waiter then re-claims when
    /// the lease runs out).
    pub async fn watch(self: &Arc<Self>, channel: String) -> Watch {
        let notify = {
            let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
            local.entry(channel.clone()).or_default().clone()
        };
        let watch = Watch {
            waiters: self.clone(),
            channel,
            notify,
        };
        if let Some(sharded) = &self.sharded {
            let mut subscribed = sharded.subscribed.lock().await;
            if !subscribed.contains_key(&watch.channel) {
                sharded.subscribe(&mut subscribed, &watch.channel).await;
            }
        }
        watch
    }

    /// Drops the sharded subscription of `channel` unless a waiter came back for it.
    async fn unsubscribe(&self, channel: String) {
        let Some(sharded) = &self.sharded else {
            return;
        };
        let mut subscribed = sharded.subscribed.lock().await;
        let back = (self.local.lock().unwrap_or_else(|p| p.into_inner())).contains_key(&channel);
        if back || subscribed.remove(&channel).is_none() {
            return;
        }
        let left =
            tokio::time::timeout(sharded.timeout, sharded.client.sunsubscribe(channel)).await;
        if !matches!(left, Ok(Ok(()))) {
            tracing::debug!("could not unsubscribe from a record's channel");
        }
    }

    /// Sharded channels subscribed to now (cluster mode; for tests and metrics).
    pub async fn sharded_subscriptions(&self) -> usize {
        match &self.sharded {
            Some(sharded) => sharded.subscribed.lock().await.len(),
            None => 0,
        }
    }

    /// Wakes this replica's waiters on `channel` (the subscription does it for every
    /// message; a completion that publishes nothing does it for its own replica).
    pub fn wake(&self, channel: &str) {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = local.get(channel) {
            notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        for notify in local.values() {
            notify.notify_waiters();
        }
    }
}

/// Wakes the waiters of each completion or release the subscription hears; an admin
/// invalidation also drops its record from the replay cache.
fn fan_out(
    fan_out: Arc<Waiters>,
    mut messages: broadcast::Receiver<Message>,
    cache: Option<Arc<ReplayCache>>,
) {
    tokio::spawn(async move {
        loop {
            match messages.recv().await {
                Ok(message) if message.channel == fan_out.invalidations => {
                    let Some(key) = message.value.as_string() else {
                        continue;
                    };
                    if let (Some(cache), Some(record)) = (&cache, record_of(&key)) {
                        cache.remove(record);
                    }
                    fan_out.wake(&format!("{key}:done"));
                }
                Ok(message) => fan_out.wake(&message.channel),
                // Missed some: wake everyone (each re-checks its record), and forget
                // the replay cache, since a missed message may be an invalidation.
                Err(RecvError::Lagged(_)) => {
                    if let Some(cache) = &cache {
                        cache.clear();
                    }
                    fan_out.wake_all();
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// After every (re)connection of the subscriber: the replay cache starts empty, and
/// every waiter re-checks its record.
fn forget_on_reconnect<T: Clone + Send + 'static>(
    fan_out: Arc<Waiters>,
    mut reconnects: broadcast::Receiver<T>,
    on_reconnect: Option<Arc<ReplayCache>>,
) {
    tokio::spawn(async move {
        loop {
            match reconnects.recv().await {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if let Some(cache) = &on_reconnect {
                        cache.clear();
                    }
                    fan_out.wake_all();
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Subscribes to the invalidations and (outside cluster mode) the completion channels'
/// pattern, retrying until it succeeds, then keeps the client for the process' life.
fn subscribe(subscriber: SubscriberClient, channels: Channels) {
    tokio::spawn(async move {
        // The first subscription may meet a Redis that is down: keep trying.
        loop {
            let subscribed = subscriber.wait_for_connect().await.is_ok()
                && subscriber
                    .subscribe(channels.invalidations.clone())
                    .await
                    .is_ok()
                && (channels.sharded
                    || subscriber
                        .psubscribe(channels.pattern.clone())
                        .await
                        .is_ok());
            if subscribed {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        // Keep the client alive for the life of the process.
        std::future::pending::<()>().await;
        drop(subscriber);
    });
}
