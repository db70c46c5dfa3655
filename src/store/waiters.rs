//! Waiting duplicates (`in_flight = "wait"`): one Redis pub/sub subscription per
//! replica to every record's completion channel, fanned out to the local requests
//! waiting on that record. The completion and release scripts publish; nothing polls.
//! The same subscription carries admin invalidations to the replay cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fred::clients::SubscriberClient;
use fred::prelude::{
    Builder, ClientLike, Config as FredConfig, EventInterface, PubsubInterface, ReconnectPolicy,
};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;

use super::memory::ReplayCache;
use crate::config::RedisConfig;
use crate::idempotency::RecordId;

/// Local waiters by channel, woken by the subscription.
pub struct Waiters {
    local: Mutex<HashMap<String, Arc<Notify>>>,
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
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut local = self.waiters.local.lock().unwrap_or_else(|p| p.into_inner());
        // Ours plus the map's: nobody else waits here any more.
        if Arc::strong_count(&self.notify) <= 2 {
            local.remove(&self.channel);
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
        pattern: String,
        cache: Option<Arc<ReplayCache>>,
    ) -> Result<Arc<Self>, fred::error::Error> {
        let mut fred_config = FredConfig::from_url(&config.url)?;
        crate::tls::redis::apply(&mut fred_config, config)?;
        fred_config.fail_fast = false;
        let subscriber: SubscriberClient = Builder::from_config(fred_config)
            .with_performance_config(|p| p.broadcast_channel_capacity = 4096)
            .with_connection_config(|c| c.connection_timeout = config.connect_timeout)
            .set_policy(ReconnectPolicy::new_constant(0, 100))
            .build_subscriber_client()?;
        let waiters = Arc::new(Self {
            local: Mutex::new(HashMap::new()),
        });
        let mut messages = subscriber.message_rx();
        let (fan_out, on_message) = (waiters.clone(), cache.clone());
        tokio::spawn(async move {
            let cache = on_message;
            loop {
                match messages.recv().await {
                    Ok(message) => {
                        if let (Some(cache), Some("I")) =
                            (&cache, message.value.as_str().as_deref())
                        {
                            if let Some(record) = record_of(&message.channel) {
                                cache.remove(record);
                            }
                        }
                        fan_out.wake(&message.channel);
                    }
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
        // While the subscription was down, invalidations went unheard: after every
        // (re)connection, the replay cache starts empty, and waiters re-check.
        let mut reconnects = subscriber.reconnect_rx();
        let (on_reconnect, fan_out) = (cache.clone(), waiters.clone());
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
        subscriber.connect();
        let _resubscribe = subscriber.manage_subscriptions();
        tokio::spawn(async move {
            // The first subscription may meet a Redis that is down: keep trying.
            loop {
                if subscriber.wait_for_connect().await.is_ok()
                    && subscriber.psubscribe(pattern.clone()).await.is_ok()
                {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            // Keep the client alive for the life of the process.
            std::future::pending::<()>().await;
            drop(subscriber);
        });
        Ok(waiters)
    }

    /// Registers interest in `channel`.
    pub fn watch(self: &Arc<Self>, channel: String) -> Watch {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        let notify = local.entry(channel.clone()).or_default().clone();
        Watch {
            waiters: self.clone(),
            channel,
            notify,
        }
    }

    fn wake(&self, channel: &str) {
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
